# ruff: noqa: E501 - the cases are real messages, kept whole
"""The classification table: every rule matches a real message in its own source, names it with
its signature, and a near miss (the same words elsewhere, or a test's own check) does not."""

from __future__ import annotations

import pytest

from stagebot.harness.analysis.rules import RULES, judge, read_sources

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.10 GiB of which 1.19 GiB is free. Process 31337 has 60.40 GiB memory in use. "
    "Including non-PyTorch memory, this process has 17.50 GiB memory in use. Of the allocated "
    "memory 16.02 GiB is allocated by PyTorch, and 1.05 GiB is reserved by PyTorch but unallocated."
)
OWN_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total "
    "capacity of 79.10 GiB of which 3.12 GiB is free. Including non-PyTorch memory, this process "
    "has 75.91 GiB memory in use. Of the allocated memory 74.50 GiB is allocated by PyTorch, and "
    "910.00 MiB is reserved by PyTorch but unallocated."
)
WATCHDOG = (
    "[rank1]:[E1130 21:02:11.123456 4242 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) "
    "Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, "
    "NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600057 milliseconds before timing out."
)


def log(message: str = "", stderr: str = "", stdout: str = "") -> str:
    text = message
    if stderr:
        text += f"\n----- Captured stderr call -----\n{stderr}"
    if stdout:
        text += f"\n----- Captured stdout call -----\n{stdout}"
    return text


# (rule, evidence line, log, expected signature)
CASES = [
    (
        "oom-foreign",
        None,
        log("E   " + OOM),
        "OOM: GPU 0 memory held by another process (process 31337 holds 60.40 GiB)",
    ),
    ("disk-full", "OSError: [Errno 28] No space left on device: '/ckpt/model.pt'", "", "disk full"),
    (  # the runner's own disk: pytest itself cannot write
        "disk-full",
        "pytest ended with an internal error (exit 3): INTERNALERROR> OSError: [Errno 28] No space left on device\nINTERNALERROR> ...",
        None,
        "disk full",
    ),
    (
        "disk-quota",
        None,
        log("E   OSError: [Errno 122] Disk quota exceeded: '/home/ci/.cache/torch/kernels/k.so'"),
        "disk full: quota exceeded",
    ),
    (
        "gpu-ecc",
        None,
        log("E   RuntimeError: CUDA error: uncorrectable ECC error encountered"),
        "GPU ECC error",
    ),
    (
        "gpu-xid",
        None,
        log(
            "E   RuntimeError: CUDA error: unspecified launch failure",
            stderr="NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.",
        ),
        "GPU Xid 79 on PCI:0000:3b:00",
    ),
    (
        "gpu-lost",
        None,
        log(
            "E   RuntimeError: CUDA driver error: unknown error",
            stdout="Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error",
        ),
        "lost GPU",
    ),
    (
        "gpu-unavailable",
        None,
        log("E   RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"),
        "GPU unavailable",
    ),
    (
        "download-failed",
        None,
        log(
            "E   requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /gpt2/resolve/main/config.json"
        ),
        "download failed",
    ),
    (
        "runner-killed",
        "crashed: the worker was killed by SIGKILL during this test",
        "",
        "runner killed",
    ),
    (
        "nccl-system-error",
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        "",
        "NCCL system error",
    ),
    (
        "harness-output",
        "corrupt output: tests.jsonl is corrupt (line 3 is not a JSON record)",
        "",
        "unreadable test results",
    ),
    (
        "harness-output",
        "result.json unreadable: not valid JSON (CPU-PyTorch-1/result.json)",
        "",
        "unreadable test results",
    ),
    (
        "rank-signal",
        None,
        log(
            "E   RankFailure: 1 of 2 ranks failed (gloo): rank 1: killed by SIGSEGV (exit code -11)\n--- rank 1: killed by SIGSEGV (exit code -11) ---\nexited with code -11 and no result"
        ),
        "crash: SIGSEGV in rank 1",
    ),
    (
        "rank-signal",
        None,
        log(
            "E   torch.multiprocessing.spawn.ProcessExitedException: process 3 terminated with signal SIGBUS"
        ),
        "crash: SIGBUS in rank 3",
    ),
    (
        "rank-signal",
        "stagebot.harness.suites.sharding_ir.spawn.RankFailure: 2 of 2 ranks failed (gloo): rank 0: stopped after another rank failed; rank 1: killed by SIGSEGV (exit code -11)",
        "",
        "crash: SIGSEGV in rank 1",
    ),
    (  # what harness/suites/sharding_ir/spawn.py raises when a limit runs out
        "rank-deadline",
        "stagebot.harness.suites.sharding_ir.spawn.SpawnTimeout: 2 ranks (gloo) timed out after 301.2 s of run (limit 300 s: 20 x start-up 9.1 s (the slowest measured), at least 300 s); load average 17.52 on 2 CPUs: rank 0: still running when the limit ran out; rank 1: still running when the limit ran out",
        "",
        "time limit: 2 ranks timed out after 301.2 s of run (limit 300 s: 20 x start-up 9.1 s (the slowest measured), at least 300 s)",
    ),
    (
        "rank-deadline",
        None,
        log(
            "E   stagebot.harness.suites.sharding_ir.spawn.SpawnTimeout: 4 ranks (nccl) timed out after 600.4 s of start-up (limit 600 s: the start-up limit); load average 3.00 on 16 CPUs: rank 3: still running when the limit ran out"
        ),
        "time limit: 4 ranks timed out after 600.4 s of start-up (limit 600 s: the start-up limit)",
    ),
    (
        "nccl-watchdog",
        None,
        log("E   RuntimeError: boom", stderr=WATCHDOG),
        "hang: NCCL timeout (ALLREDUCE on rank 1 after 600057 ms)",
    ),
    (
        "sticky-cuda",
        None,
        log("E   RuntimeError: CUDA error: an illegal memory access was encountered"),
        "crash: CUDA error: an illegal memory access was encountered",
    ),
    (
        "oom-own",
        None,
        log("E   " + OWN_OOM),
        "OOM held by this process (75.91 GiB of 79.10 GiB, tried 8.00 GiB more)",
    ),
    (
        "process-signal",
        "crashed: the worker was killed by SIGSEGV during this test",
        "",
        "crash: pytest killed by SIGSEGV",
    ),
    (
        "subprocess-signal",
        None,
        log(
            "E   subprocess.CalledProcessError: Command '['./bench']' died with <Signals.SIGABRT: 6>."
        ),
        "crash: SIGABRT in a subprocess",
    ),
    ("process-exit", "crashed: pytest exited 134 during this test", "", "crash: pytest exited 134"),
    (
        "order-dependent",
        "order-dependent: passes alone, fails after the 4 test(s) that ran before it in its process (nearest first: t.py::test_c, t.py::test_b): assert 'fast' == 'default'",
        log("E   AssertionError: assert 'fast' == 'default'"),
        "order-dependent: passes alone, fails after 4 earlier test(s) of its process",
    ),
    (
        "shard-timeout",
        "timeout: still running when the shard was killed after 1800 s, load average 17.20 on 2 CPUs",
        "",
        "time limit: 1800 s ran out (load average 17.20 on 2 CPUs)",
    ),
    (
        "hang-alone",
        "timeout: still running when the shard was killed after 60 s, load average 1.00 on 2 CPUs; it hung again when re-run alone with a limit of 126 s",
        "",
        "hang: hangs when run alone (126 s limit)",
    ),
    (
        "shard-timeout",
        "timeout: still running when the shard was killed after 60 s, load average 1.00 on 2 CPUs; it passed when re-run alone",
        "",
        "time limit: 60 s ran out (load average 1.00 on 2 CPUs)",
    ),
    (
        "shard-timeout",
        "timeout: killed after 300 s while running t.py::test_x",
        "",
        "time limit: 300 s ran out (load average not recorded)",
    ),
    (
        "thread-timeout",
        "timeout: pytest-timeout (thread method) ended pytest during this test",
        "",
        "hang: pytest-timeout (thread method) ended pytest",
    ),
    (
        "xpass-strict",
        "[XPASS(strict)] waits for the fused kernel (#12)",
        "[XPASS(strict)] waits for the fused kernel (#12)",
        "XPASS(strict): passed though marked xfail (waits for the fused kernel (#12))",
    ),
    (
        "timeout",
        None,
        log("E   Failed: Timeout (>30.0s) from pytest-timeout."),
        "hang: killed after 30.0 s",
    ),
    (
        "numerics",
        None,
        log(
            "E   AssertionError: Tensor-likes are not close!\nE   \nE   Mismatched elements: 3 / 1024 (0.3%)"
        ),
        "numerics: 3/1024 mismatched",
    ),
    (
        "hypothesis",
        None,
        log("E   assert 2 == 3\nFalsifying example: test_mean(\n    xs=[0.0, 1.0],\n)"),
        "hypothesis: falsifying example test_mean(",
    ),
    (
        "rank-exception",
        None,
        log("--- rank 0: exception ValueError: math domain error ---"),
        "ValueError: math domain error in rank 0",
    ),
    (
        "import",
        None,
        log(
            "E   ImportError: cannot import name 'normalize' from 'mathkit.text' (/r/src/mathkit/text.py)"
        ),
        "import: ImportError: cannot import name 'normalize' from 'mathkit.text' (/r/src/mathkit/text.py)",
    ),
]

# (evidence, log): the words of a rule where the rule does not look, or a test's own check.
NEAR_MISSES = [
    ("AssertionError: expected 2 NCCL all-reduce calls, got 3", ""),
    ("AssertionError: the OOM guard did not trigger", log("E   assert oom_count == 0")),
    (None, log("E   assert 'killed by SIGKILL' in text")),  # exit status is not the message
    (None, log("E   AssertionError: x", stdout="retrying after Temporary failure")),
    (None, log("E   assert 1 == 2", stdout="Process 12 has 3.00 GiB memory in use")),
    # a test fakes a full disk (caught, logged), then fails in the PR's code
    (
        "TypeError: write_shard() got an unexpected keyword argument 'retries'",
        log(
            "E   OSError: [Errno 28] No space left on device\n\nDuring handling of the above exception, another exception occurred:\n\n    def test_x():\nE   TypeError: write_shard() got an unexpected keyword argument 'retries'",
            stderr="[Errno 28] No space left on device: falling back to /tmp",
        ),
    ),
    # the driver's words printed by a test whose own error is not a CUDA failure
    (None, log("E   ValueError: bad shape", stderr="NVRM: Xid (PCI:0000:3b:00): 79, pid=1")),
    (None, log("E   assert 'Disk quota exceeded' in str(err)")),
]


@pytest.mark.parametrize(
    ("rule", "evidence", "text", "signature"), CASES, ids=[c[0] for c in CASES]
)
def test_each_rule_matches_its_source(rule, evidence, text, signature) -> None:
    (found,) = [r for r in RULES if r.name == rule]
    got = found.match(read_sources(evidence, text))
    assert got is not None and got.startswith(signature), got
    verdict = judge(read_sources(evidence, text))
    if found.machine is True:
        assert verdict.machine is found and verdict.machine_signature == got
    elif found.machine is False:
        assert verdict.machine is None


def test_every_rule_has_a_case() -> None:
    untested = {r.name for r in RULES} - {c[0] for c in CASES}
    assert untested == {"connection-refused"}  # shard-wide: see test_shard_wide_errors_are_infra


@pytest.mark.parametrize(("evidence", "text"), NEAR_MISSES)
def test_near_misses_are_not_machine_level(evidence, text) -> None:
    assert judge(read_sources(evidence, text)).machine is None


def test_an_oom_the_gpu_could_never_satisfy_is_the_tests() -> None:
    """More than the device holds (or than this process leaves free) is the test's own request,
    whoever else holds memory; each neighbour counts once (evidence line and log name it both)."""
    too_big = OOM.replace("Tried to allocate 2.00 GiB", "Tried to allocate 120.00 GiB")
    assert judge(read_sources(too_big, log("E   " + too_big))).machine is None
    # fits in total, not in what this process leaves free (79.10 - 17.50 = 61.60 GiB)
    beyond_mine = OOM.replace("Tried to allocate 2.00 GiB", "Tried to allocate 62.00 GiB")
    assert judge(read_sources(beyond_mine, log("E   " + beyond_mine))).machine is None
    verdict = judge(read_sources(OOM, log("E   " + OOM)))  # the control: a neighbour's fault
    assert verdict.machine_signature == (
        "OOM: GPU 0 memory held by another process (process 31337 holds 60.40 GiB)"
    )


def test_the_final_exception_is_the_last_e_block() -> None:
    from stagebot.harness.analysis.rules import final_exception

    chained = "E   OSError: [Errno 28] x\n\nDuring handling ...\n\nE   TypeError: y\nE     more"
    assert final_exception(chained) == "TypeError: y\nmore"
    assert final_exception("no E lines here") is None
    assert read_sources("crashed: pytest exited 1 during this test", None)["final"] == (
        "crashed: pytest exited 1 during this test"
    )


def test_sources_split_the_log() -> None:
    sources = read_sources(
        "passed on re-run 1 after: timeout: still running when the shard was killed after 9 s",
        log("E   assert 1", stderr="warn", stdout="hello"),
    )
    assert sources["stderr"].strip() == "warn" and sources["stdout"].strip() == "hello"
    assert sources["timeout"].startswith("timeout: still running") and not sources["exit"]
    assert "E   assert 1" in sources["message"] and "warn" not in sources["message"]


def test_the_failure_analysis_doc_lists_every_rule() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "failure-analysis.md").read_text()
    for rule in RULES:
        assert f"| `{rule.name}` | {', '.join(rule.where)} |" in doc, rule.name
