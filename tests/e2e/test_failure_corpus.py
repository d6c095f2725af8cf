"""The failure corpus (tests/fixtures/corpus): a user repository's base pipeline on main, then a
PR pipeline against it, both through `bot run` with real pytest processes; every failure's
category, signature, key line (in report.md) and suspects are checked."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
from fixtures.botrun import ROOT, bot
from helpers import extras

from stagebot.templates.markdown import escape

pytestmark = pytest.mark.slow

CORPUS = ROOT / "tests" / "fixtures" / "corpus"
STAGES = ", ".join(
    f"CPU-PyTorch-{name}-1"
    for name in (
        "Unit",
        "Machine",
        "Dist",
        "Native",
        "Device",
        "Sched",
        "Flaky",
        "Boot",
        "Watch",
        "Verdict",
    )
)
# The broken machine of the PR run: a neighbour on GPU 1, a full disk, a used-up quota, ECC and
# Xid errors, no network, the parameter server down, a cold cache.
BROKEN_MACHINE = {
    "CORPUS_GPU_NEIGHBOURS": "1=31337:60.40",
    "CORPUS_DISK_FULL": "1",
    "CORPUS_QUOTA_FULL": "1",
    "CORPUS_GPU_FAULT": "ecc,xid",
    "CORPUS_OFFLINE": "1",
    "CORPUS_PARAM_SERVER_DOWN": "1",
    "CORPUS_COLD_ATTEMPTS": "2",
}
U, M = "tests/unit/", "tests/machine/"
# test id -> (category, signature (regex), a key line of report.md, the culprit suspect or None)
EXPECTED = {
    U + "check_stats.py::test_mean_of_ones": (
        "NEW",
        "assertion",
        "assert 1.3333333333333333 == 1.0",
        "src/mathkit/stats.py",
    ),
    U + "check_stats.py::test_mean_is_within_bounds": (
        "NEW",
        r"hypothesis: falsifying example test_mean_is_within_bounds\(",
        # hypothesis words it one way or the other by version
        (
            "Failing test case: test_mean_is_within_bounds(",
            "Falsifying example: test_mean_is_within_bounds(",
        ),
        "src/mathkit/stats.py",
    ),
    U + "check_stats.py::test_median_of_unsorted": (
        "UNCLASSIFIED",
        "assertion",
        "assert 1.0 == 2.0",
        None,
    ),
    U + "check_linalg.py::test_blocked_matmul_matches_reference": (
        "NEW",
        r"numerics: \d+/1024 mismatched",
        "Mismatched elements:",
        "src/mathkit/linalg.py",
    ),
    U + "check_comm.py::test_allreduce_count": (
        "NEW",
        "assertion",
        "expected 2 NCCL all-reduce calls for 4 layers, got 4",
        "src/mathkit/collectives.py",
    ),
    U + "check_comm.py::test_broadcast_weights": (
        "NEW",
        re.escape("hang: NCCL timeout (BROADCAST on rank 0 after 600081 ms)"),
        "DistBackendError",
        "src/mathkit/collectives.py",
    ),
    U + "check_memory.py::test_workspace_fits": (
        "NEW",
        re.escape("OOM held by this process (40.00 GiB of 79.10 GiB, tried 48.00 GiB"),
        "Tried to allocate 48.00 GiB",
        "src/mathkit/memory.py",
    ),
    U + "check_legacy.py::test_rounding_half_even": (
        "PRE-EXISTING",
        "assertion",
        "assert 3 == 2",
        None,
    ),
    U + "check_legacy.py::test_known_broken_layout": ("WAIVED", None, "issues/17", None),
    U + "check_loader.py::test_parse_config": (
        "NEW",
        "import: ImportError: cannot import name 'parse_config'",
        "cannot import name 'parse_config'",
        "src/mathkit/loader.py",
    ),
    U + "check_tokenize.py": (
        "NEW",
        "collection error: import: ImportError: cannot import name 'normalize'",
        "hides 2 test(s) that passed on base",
        "src/mathkit/text.py",
    ),
    U + "check_experimental.py": (
        "UNCLASSIFIED",
        "collection error: import: ModuleNotFoundError",
        "No module named 'mathkit.experimental'",
        None,
    ),
    "tests/dist/check_parallel.py::test_sharded_sum": (
        "NEW",
        "crash: SIGSEGV in rank 1",
        "process 1 terminated with signal SIGSEGV",
        "src/mathkit/parallel.py",
    ),
    "tests/dist/check_parallel.py::test_gather_shapes": (
        "NEW",
        re.escape("hang: NCCL timeout (ALLGATHER on rank 0 after 1004 ms)"),
        "terminate called after throwing an instance of",
        "src/mathkit/parallel.py",
    ),
    "tests/native/check_native.py::test_fast_sum": (
        "NEW",
        "crash: pytest killed by SIGSEGV",
        "Fatal Python error: Segmentation fault",
        "src/mathkit/native.py",
    ),
    "tests/device/check_device.py::test_scatter_kernel": (
        "NEW",
        "crash: CUDA error: an illegal memory access was encountered",
        "collateral: 2 later test(s)",
        "src/mathkit/device.py",
    ),
    # the shard's own time limit (the catalog's minute) ran out during it, and re-run alone
    # with twice the time it had had it hangs again: the PR's hang, not the machine's limit (a
    # one-off stall that passes alone stays INFRA: the v4 corpus's tests/stall)
    "tests/sched/check_scheduler.py::test_drain_queue": (
        "NEW",
        r"hang: hangs when run alone \(\d+ s limit\)$",
        "timeout: still running when the shard was killed after 60 s, load average",
        "src/mathkit/scheduler.py",
    ),
    "(pytest session)": (
        "NEW",
        "suite verdict",
        "[mathkit] FAIL forced backend fused: no case ran on it",
        None,
    ),
    M + "check_checkpoint.py::test_save_checkpoint": (
        "INFRA",
        "disk full",
        "No space left on device",
        None,
    ),
    M + "check_checkpoint.py::test_gpu_memory_health": (
        "INFRA",
        "GPU ECC error",
        "uncorrectable ECC error encountered",
        None,
    ),
    M + "check_checkpoint.py::test_kernel_launch": (
        "INFRA",
        "GPU Xid 79",
        "NVRM: Xid (PCI:0000:3b:00): 79",
        None,
    ),
    M + "check_checkpoint.py::test_download_tokenizer": (
        "INFRA",
        "download failed",
        "Max retries exceeded with url",
        None,
    ),
    M + "check_gpu_share.py::test_small_batch_on_gpu1": (
        "INFRA",
        re.escape("OOM: GPU 1 memory held by another process (process 31337 holds 60.40 GiB)")
        + "$",  # the neighbour once, though the evidence line and the log both name it
        "Process 31337 has 60.40 GiB memory in use",
        None,
    ),
    M + "check_service.py::test_push_gradients": (
        "INFRA",
        "connection refused",
        "same error in 3 tests",
        None,
    ),
    "tests/flaky/check_flaky.py::test_reconnect_after_timeout": (
        "FLAKY",
        re.escape("flaky: hang: NCCL timeout (ALLREDUCE on rank 0 after 1021 ms) once"),
        "Watchdog caught collective operation timeout",
        None,
    ),
    "tests/flaky/check_flaky.py::test_warm_cache": ("FLAKY", "Failed", "flaky on main: #1", None),
    # -- issue 29: each decision rests on the evidence that decides it --------------------------
    U + "check_files.py::test_reads_every_data_file": (  # not UTF-8: recorded, shown as \xNN
        "UNCLASSIFIED",
        "ValueError",
        "ValueError: no reader for caf\\xe9.csv",
        None,
    ),
    "tests/flaky/check_order.py::test_default_mode": (  # passes alone, not after test_fast_mode
        "NEW",
        re.escape("order-dependent: passes alone, fails after 4 earlier test(s) of its process"),
        "order-dependent: passes alone, fails after the 4 test(s)",
        "tests/flaky/check_order.py::test_fast_mode",
    ),
    M + "check_export.py::test_falls_back_when_the_disk_is_full": (  # fakes ENOSPC, then a bug
        "NEW",
        "TypeError",
        "TypeError: test_falls_back_when_the_disk_is_full.<locals>.full_disk() got an unexpected",
        "src/mathkit/export.py",
    ),
    M + "check_gpu_share.py::test_large_batch_on_gpu1": (  # 48 GiB never fit next to its 40
        "NEW",
        re.escape("OOM held by this process (40.00 GiB of 79.10 GiB, tried 48.00 GiB more)"),
        "Tried to allocate 48.00 GiB",
        "src/mathkit/memory.py",
    ),
    "CPU-PyTorch-Boot-1 (whole shard)": (  # the conftest cannot import the PR's module
        "NEW",
        "import: ImportError: no kernel backend registered",
        "no test ran here; 1 test(s) of CPU-PyTorch-Boot passed on base #1",
        "src/mathkit/registry.py",
    ),
    U + "check_cache.py::test_ping": (  # the suite's own server on 127.0.0.1 never listens
        "NEW",
        "connection refused",
        "ConnectionRefusedError: [Errno 111] Connection refused",
        "src/mathkit/cache.py",
    ),
    U + "check_cache_stats.py::test_hit_after_ping": (
        "NEW",
        "connection refused",
        "ConnectionRefusedError: [Errno 111] Connection refused",
        "src/mathkit/cache.py",
    ),
    "tests/flaky/check_flaky.py::test_fetch_manifest": (  # flaky on main, a TypeError here
        "NEW",
        "TypeError",
        "fails differently than on main (flaky there #1: Failed)",
        "src/mathkit/manifest.py",
    ),
    U + "check_legacy.py::test_percentile_of_two": (  # base: its assertion; here: a KeyError
        "NEW",
        "KeyError",
        "fails differently than on base #1: there assertion",
        "src/mathkit/stats.py",
    ),
    M + "check_checkpoint.py::test_cache_compiled_kernels": (
        "INFRA",
        "disk full: quota exceeded",
        "Disk quota exceeded",
        None,
    ),
    U + "check_coverage.py::test_median_of_two": (
        "NEW",
        "assertion",
        "new coverage: did not run on base #1 (skipped there)",
        "src/mathkit/stats.py",
    ),
    U + "check_legacy.py::test_mode_is_the_most_common": (
        "NEW",
        re.escape(
            "XPASS(strict): passed though marked xfail (mode() returns the first value (issue 16))"
        ),
        "[XPASS(strict)] mode() returns the first value (issue 16)",
        "src/mathkit/stats.py",
    ),
    "tests/watch/check_jobs.py::test_wait_for_job": (
        "NEW",
        re.escape("hang: pytest-timeout (thread method) ended pytest"),
        "timeout: pytest-timeout (thread method) ended pytest during this test",
        "src/mathkit/jobs.py",
    ),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    extras.require("torch")  # the corpus's library and tests are torch code
    tmp = tmp_path_factory.mktemp("corpus")
    repo = tmp / "repo"
    shutil.copytree(CORPUS / "base", repo)
    common = ["--catalog", str(repo / "ci"), "--ledger", str(tmp / "ledger.sqlite")]
    common += ["--root", str(repo), "--cpu-slots", "3"]
    comment = f'/bot run --stage-list "{STAGES}" --disable-fail-fast'
    base = bot(
        "run", *common, "--out", str(tmp / "base"), "--commit", "base0", "--branch", "main", comment
    )
    assert base.returncode == 1, base.stdout + base.stderr  # the pre-existing failure
    changed = sorted(str(p.relative_to(CORPUS / "pr")) for p in (CORPUS / "pr").rglob("*.py"))
    shutil.copytree(CORPUS / "pr", repo, dirs_exist_ok=True)
    (tmp / "changed.txt").write_text("\n".join(changed) + "\n")
    pr = bot(
        "run",
        *common,
        "--out",
        str(tmp / "pr"),
        "--commit",
        "head1",
        "--base-commit",
        "base0",
        "--pr",
        "7",
        "--changed-files",
        str(tmp / "changed.txt"),
        comment,
        env=BROKEN_MACHINE,
    )
    assert pr.returncode == 1, pr.stdout + pr.stderr
    report = json.loads(
        bot(
            "report",
            "--ledger",
            str(tmp / "ledger.sqlite"),
            "--root",
            str(repo),
            "--format",
            "json",
        ).stdout
    )
    failures = {f["test_id"]: f for f in report["failures"]}
    return failures, *((tmp / "pr" / name).read_text() for name in ("report.md", "report.html"))


def test_every_failure_has_its_category_and_signature(corpus) -> None:
    failures, _, _ = corpus
    assert len(EXPECTED) >= 20
    wrong = []  # every case that is off, not only the first
    for test_id, (category, signature, _, _) in EXPECTED.items():
        got = failures.get(test_id)
        if got is None:
            wrong.append((test_id, "missing"))
        elif got["category"] != category or (
            signature is not None and not re.match(signature, got["signature"] or "")
        ):
            wrong.append((test_id, got["category"], got["signature"], got["note"]))
    assert not wrong, wrong


def test_collateral_and_duplicates_are_folded(corpus) -> None:
    failures, report, _ = corpus
    sticky = failures["tests/device/check_device.py::test_scatter_kernel"]
    assert sticky["collateral"] == [
        "tests/device/check_device.py::test_copy_back",
        "tests/device/check_device_more.py::test_zz_roundtrip",
    ]
    assert "tests/device/check_device.py::test_copy_back" not in failures
    assert sorted(t for t in failures if "::" not in t) == [  # one entry per broken file
        "(pytest session)",
        "CPU-PyTorch-Boot-1 (whole shard)",  # no test ran: the conftest failed to import
        "tests/unit/check_experimental.py",
        "tests/unit/check_tokenize.py",
        # the forced backend skips every case that passed on the base: lost coverage
        "tests/verdict/check_backend_cases.py (lost coverage)",
    ]
    # elsewhere the collection error and the crash carry the cause
    assert report.count("(whole shard)") == report.count("CPU-PyTorch-Boot-1 (whole shard)")
    assert report.count("check_service.py::test_pull_weights") == 1  # in "same error in 3 tests"


def test_each_key_line_is_in_the_report(corpus) -> None:
    _, report, _ = corpus
    missing = []
    for test_id, (_, _, line, _) in EXPECTED.items():
        wordings = line if isinstance(line, tuple) else (line,)
        # as the report escapes test output
        if not any(escape(w) in report for w in wordings):
            missing.append((test_id, line))
    assert not missing, missing
    assert len(report) <= 65_536


def test_the_html_report_shows_signatures_and_key_lines(corpus) -> None:
    """The HTML report says what the reply says: each failure's signature and its key lines."""
    from markupsafe import escape as html  # as the template escapes

    failures, _, page = corpus
    missing = []
    for test_id, (_, _, line, _) in EXPECTED.items():
        signature = failures.get(test_id, {}).get("signature")
        wordings = line if isinstance(line, tuple) else (line,)
        if signature and f'<b class="signature">{html(signature)}</b>' not in page:
            missing.append((test_id, signature))
        folded = line == "same error in 3 tests"  # the reply folds; the HTML lists each one
        if not folded and not any(html(w) in page for w in wordings):
            missing.append((test_id, line))
    assert not missing, missing


def test_suspects_name_the_culprit_first(corpus) -> None:
    failures, _, _ = corpus
    wrong = []
    for test_id, (_, _, _, culprit) in EXPECTED.items():
        if culprit is not None:
            got = failures.get(test_id, {}).get("suspects", [])
            suspects = [s["path"] for s in got]
            if not suspects or suspects[0] != culprit or len(suspects) > 3:
                wrong.append((test_id, got))
    assert not wrong, wrong


def test_a_collection_errors_junit_case_keeps_the_files_id(tmp_path) -> None:
    """pytest names a module that failed to import by its dotted name, with no class: read back
    as the file's path, the id the stream uses, so it is one failure, not two."""
    from stagebot.harness.run.junit import read_junit

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "check_broken.py").write_text("import no_such_module_here\n")
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:stagebot"]
        + ["--junitxml=j.xml", "pkg/check_broken.py"],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
    )
    (case,) = read_junit(tmp_path / "j.xml")
    assert (case.test_id, case.outcome) == ("pkg/check_broken.py", "error")


def test_a_suites_verdict_fails_the_shard_although_every_case_skipped(tmp_path) -> None:
    """The exit status is read before NOT_RUN: pytest exiting 1 with every case skipped (the
    suite's forced backend never ran) is a failing item with the suite's line, not NOT_RUN."""
    repo = tmp_path / "repo"
    shutil.copytree(CORPUS / "base", repo)
    shutil.copy(CORPUS / "pr" / "src" / "mathkit" / "backends.py", repo / "src" / "mathkit")
    done = bot(
        "run", "--catalog", str(repo / "ci"), "--ledger", str(tmp_path / "l.sqlite"),
        "--root", str(repo), "--out", str(tmp_path / "out"), "--commit", "c1",
        '/bot run --stage-list "CPU-PyTorch-Verdict-1"',
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads((tmp_path / "out" / "CPU-PyTorch-Verdict-1" / "result.json").read_text())
    assert result["state"] == "FAILURE"
    verdict = [t for t in result["tests"] if t["test_id"] == "(pytest session)"]
    assert verdict[0]["evidence"] == "[mathkit] FAIL forced backend fused: no case ran on it"
