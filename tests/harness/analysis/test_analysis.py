"""Failure analysis: evidence, numeric mismatches, categories, pipeline state, exit code."""

from __future__ import annotations

import pytest
from helpers import extras

from stagebot.harness.analysis.classify import analyse, is_infra
from stagebot.harness.analysis.evidence import error_line, log_error_line, mismatch, test_evidence
from stagebot.harness.results import StageResult
from stagebot.harness.results import TestOutcome as Outcome


def shard(stage="S-PyTorch-1", state="FAILURE", tests=(), evidence=None) -> StageResult:
    return StageResult(
        stage, 1, 1, state, None, None, 1.0, "CPU", [], list(tests), evidence=evidence
    )


def test_real_torch_assert_close_message() -> None:
    torch = extras.require("torch")
    try:
        torch.testing.assert_close(
            torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([[1.0, 2.5], [3.0, 4.0]])
        )
    except AssertionError as error:
        text = "\n".join(f"E       {line}" for line in f"AssertionError: {error}".splitlines())
    numbers = mismatch(text)
    assert (numbers.mismatched, numbers.total, numbers.max_abs) == (1, 4, 0.5)
    assert numbers.max_abs_at == "(0, 1)" and numbers.max_rel == pytest.approx(0.2)
    assert test_evidence(text) == (
        "AssertionError: Tensor-likes are not close! — 1/4 elements mismatched, "
        "max abs diff 0.5 at (0, 1), max rel diff 0.2 at (0, 1)"
    )


def test_error_lines_are_the_real_error() -> None:
    longrepr = (
        "    def test_x():\n>       helper()\n\nt.py:3:\n_ _ _\n"
        "E       KeyError: 'expert_7'\n\nt.py:9: KeyError"
    )
    assert error_line(longrepr) == "KeyError: 'expert_7'"
    assert error_line("E   assert 6 == 7\nE    +  where 6 = sum([1])") == "assert 6 == 7"
    assert log_error_line("building...\nRuntimeError: CUDA out of memory\nexit 1\n") == (
        "RuntimeError: CUDA out of memory"
    )
    assert error_line("") is None and mismatch("AssertionError: no numbers") is None


def test_categories_against_the_base() -> None:
    tests = [
        Outcome("t.py::new", "failed", 1, "AssertionError: x"),
        Outcome("t.py::old", "failed", 1, "AssertionError: y"),
        Outcome("t.py::unseen", "failed", 1, "AssertionError: z"),
        Outcome("t.py::flaky", "flaky", 1, "passed on re-run 1 after: AssertionError: w", 2),
        Outcome("t.py::disk", "error", 1, "OSError: [Errno 28] No space left on device: 'ckpt'"),
        Outcome("t.py::waived", "waived", 0, "bug 1"),
        Outcome("t.py::ok", "passed", 1),
    ]
    base = {
        ("S-PyTorch", "t.py::new"): Outcome("t.py::new", "passed", 1.5),
        ("S-PyTorch", "t.py::old"): Outcome("t.py::old", "failed", 1),
    }
    analysis = analyse(
        [shard(tests=tests)],
        base=base,
        base_pipeline=3,
        changed_files=["t_helpers.py", "docs/x.md", "src/a.py"],
        stage_paths={"S-PyTorch-1": ["src/**"]},
    )
    got = {f.test_id.split("::")[1]: f for f in analysis.failures}
    assert {k: f.category for k, f in got.items()} == {
        "new": "NEW",
        "old": "PRE-EXISTING",
        "unseen": "UNCLASSIFIED",
        "flaky": "FLAKY",
        "disk": "INFRA",
        "waived": "WAIVED",
    }
    assert got["old"].note == "also failing on base #3"
    assert got["new"].note == "passed on base #3 in 1.50 s"
    assert got["unseen"].note == "base #3 did not run this test in S-PyTorch"
    assert got["flaky"].signature == "flaky: assertion once"
    assert got["disk"].signature == "disk full"
    assert [str(s) for s in got["new"].suspects] == [  # t_helpers.py: only its folder
        "src/a.py (the stage's run_if_changed)",
    ]
    assert (analysis.state, analysis.exit_code) == ("FAILURE", 1)
    assert analyse([shard(tests=tests[:1])]).failures[0].category == "UNCLASSIFIED"


def test_base_outcome_is_read_in_the_same_stage_family() -> None:
    """The base failed this id on DGX_H200 only: a CPU failure is NEW, not PRE-EXISTING."""
    failing = [Outcome("t.py::x", "failed", 1, "AssertionError: x")]
    base = {
        ("DGX_H200-4_GPUs-PyTorch", "t.py::x"): Outcome("t.py::x", "failed", 1),
        ("CPU-PyTorch", "t.py::x"): Outcome("t.py::x", "passed", 1),
    }
    cpu = analyse([shard("CPU-PyTorch-2", tests=failing)], base=base, base_pipeline=5)
    gpu = analyse([shard("DGX_H200-4_GPUs-PyTorch-1", tests=failing)], base=base, base_pipeline=5)
    assert cpu.failures[0].category == "NEW" and gpu.failures[0].category == "PRE-EXISTING"


@pytest.mark.parametrize(
    ("tests", "state", "evidence", "cancelled", "expected"),
    [
        pytest.param(
            [Outcome("a::b", "passed", 1)], "SUCCESS", None, False, ("SUCCESS", 0), id="all passed"
        ),
        pytest.param(
            [Outcome("a::b", "flaky", 1, "passed on re-run 1", 2)],
            "SUCCESS",
            None,
            False,
            ("SUCCESS", 0),
            id="flaky only passes",
        ),
        pytest.param(
            [
                Outcome(
                    "a::b", "error", 1, "crashed: the worker was killed by SIGKILL during this test"
                )
            ],
            "ERROR",
            "crashed: pytest killed by SIGKILL while running a::b",
            False,
            ("FAILURE", 3),
            id="runner killed is infra, exits 3",
        ),
        pytest.param(
            [
                Outcome(
                    "a::b", "error", 1, "timeout: still running when the shard was killed after 9 s"
                )
            ],
            "ERROR",
            "timeout: killed after 9 s while running a::b",
            False,
            ("FAILURE", 3),
            id="the shard's own time limit is the machine's (docs/running.md's exit table)",
        ),
        pytest.param(
            [Outcome("a::b", "failed", 1, "Failed: Timeout (>30.0s) from pytest-timeout")],
            "FAILURE",
            None,
            False,
            ("FAILURE", 1),
            id="a hang under the test's own pytest-timeout is the code's",
        ),
        pytest.param(
            [],
            "ERROR",
            "crashed: pytest killed by SIGKILL",
            False,
            ("FAILURE", 3),
            id="a crash with no test is infra",
        ),
        pytest.param(
            [
                Outcome(
                    "a::b",
                    "failed",
                    1,
                    "RuntimeError: NCCL error in: X.cpp:1, unhandled system error",
                )
            ],
            "FAILURE",
            None,
            False,
            ("FAILURE", 3),
            id="NCCL system error is infra",
        ),
        pytest.param(
            [Outcome("a::b", "passed", 1)], "SUCCESS", None, True, ("ABORTED", 1), id="cancelled"
        ),
        pytest.param(
            [],
            "NOT_RUN",
            "0 tests executed",
            False,
            ("NOT_RUN", 4),
            id="nothing ran: its own state",
        ),
    ],
)
def test_pipeline_state_and_exit_code(tests, state, evidence, cancelled, expected) -> None:
    analysis = analyse([shard(state=state, tests=tests, evidence=evidence)], cancelled=cancelled)
    assert (analysis.state, analysis.exit_code) == expected


def test_a_whole_shard_error_is_listed_with_its_evidence() -> None:
    analysis = analyse([shard(state="ERROR", evidence="corrupt output: junit.xml is truncated")])
    (failure,) = analysis.failures
    assert failure.category == "INFRA" and failure.evidence.startswith("corrupt output")
    assert failure.signature == "unreadable test results"


def test_no_whole_shard_entry_when_a_test_carries_the_cause() -> None:
    """A collection error ends the shard in ERROR too: one entry, the file's, never a second
    "(whole shard)" one."""
    tests = [Outcome("t/check_x.py", "error", 0, "ImportError: cannot import name 'f' from 'm'")]
    analysis = analyse([shard(state="ERROR", tests=tests, evidence="pytest ended with …")])
    assert [f.test_id for f in analysis.failures] == ["t/check_x.py"]


def test_infra_is_not_read_from_a_test_assertion() -> None:
    for evidence in (
        "AssertionError: expected 2 NCCL all-reduce calls, got 3",
        "AssertionError: OOM guard did not trigger (out of memory expected)",
        "ValueError: the ProcessGroup size must be 4, not 3",
        "AssertionError: CUDA out of memory was expected, the call succeeded",
        "torch.testing.AssertionError: NCCL error count 2 != 0",
        "assert oom_count == 0",
        # The assertion quotes a machine-level error word for word: still the test's own words.
        "AssertionError: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error",
        'assert err == "CUDA error: uncorrectable ECC error encountered"',
        "torch.testing.AssertionError: No space left on device",
    ):
        assert not is_infra(evidence), evidence
    # The same text raised by the library is machine-level.
    assert is_infra("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error")


STICKY = "RuntimeError: CUDA error: an illegal memory access was encountered"


def test_a_sticky_cuda_error_is_one_entry_with_its_collateral() -> None:
    tests = [
        Outcome("a.py::first", "failed", 1, STICKY),
        Outcome("a.py::ok", "passed", 1),
        Outcome("b.py::later", "failed", 1, STICKY),
        Outcome("c.py::other", "failed", 1, "AssertionError: unrelated"),
        Outcome("c.py::last", "error", 1, STICKY),
    ]
    analysis = analyse([shard(tests=tests)])
    by_id = {f.test_id: f for f in analysis.failures}
    assert sorted(by_id) == ["a.py::first", "c.py::other"]
    assert by_id["a.py::first"].collateral == ("b.py::later", "c.py::last")
    assert by_id["a.py::first"].signature == (
        "crash: CUDA error: an illegal memory access was encountered"
    )


def test_shard_wide_errors_are_infra() -> None:
    """The same connection error in three tests of two files: the machine; in one test: the
    code's (compared with the base like any failure)."""
    refused = "ConnectionRefusedError: [Errno 111] Connection refused"
    many = [Outcome(f"{f}::t{i}", "failed", 1, refused) for i, f in enumerate("xyx")]
    wide = analyse([shard(tests=many)])
    assert {f.category for f in wide.failures} == {"INFRA"} and wide.exit_code == 3
    one = analyse([shard(tests=many[:1])])
    assert one.failures[0].category == "UNCLASSIFIED"
    same_file = [Outcome(f"x.py::t{i}", "failed", 1, refused) for i in range(3)]
    assert analyse([shard(tests=same_file)]).failures[0].category == "UNCLASSIFIED"


def test_flaky_history_on_main_makes_a_failure_flaky() -> None:
    tests = [Outcome("t.py::x", "failed", 1, "AssertionError: x", 3)]
    base = {("S-PyTorch", "t.py::x"): Outcome("t.py::x", "passed", 1)}
    history = {("S-PyTorch", "t.py::x"): (41, 44)}
    analysis = analyse([shard(tests=tests)], base=base, base_pipeline=44, flaky_history=history)
    (failure,) = analysis.failures
    assert (failure.category, failure.note) == ("FLAKY", "flaky on main: #41, #44")
    assert (analysis.state, analysis.exit_code) == ("SUCCESS", 0)
    other_family = {("A10-PyTorch", "t.py::x"): (41,)}
    again = analyse([shard(tests=tests)], base=base, base_pipeline=44, flaky_history=other_family)
    assert again.failures[0].category == "NEW"
    # main's flaky failures were its assertion; here a TypeError on every attempt: not that
    seen = {("S-PyTorch", "t.py::x"): ("AssertionError: x",)}
    same = analyse([shard(tests=tests)], flaky_history=history, flaky_evidence=seen)
    assert same.failures[0].category == "FLAKY"  # the control: the same kind of failure
    moved = [Outcome("t.py::x", "failed", 1, "TypeError: load() got an unexpected keyword", 3)]
    (failure,) = analyse([shard(tests=moved)], flaky_history=history, flaky_evidence=seen).failures
    assert (failure.category, failure.note) == (
        "NEW",
        "fails differently than on main (flaky there #41, #44: assertion)",
    )
    assert failure.signature == "TypeError"


def test_a_failure_that_moved_from_the_bases_assertion_is_not_pre_existing() -> None:
    base = {("S-PyTorch", "t.py::x"): Outcome("t.py::x", "failed", 1, "assert 3 == 2")}
    moved = [Outcome("t.py::x", "failed", 1, "KeyError: 'rounding'")]
    (failure,) = analyse([shard(tests=moved)], base=base, base_pipeline=3).failures
    assert failure.category == "NEW"
    assert failure.note == "fails differently than on base #3: there assertion"
    assert failure.signature == "KeyError"
    same = [Outcome("t.py::x", "failed", 1, "assert 4 == 2")]  # the control: other numbers
    assert analyse([shard(tests=same)], base=base, base_pipeline=3).failures[0].category == (
        "PRE-EXISTING"
    )


def test_a_whole_shard_failure_is_compared_with_the_base_by_family(tmp_path) -> None:
    log = tmp_path / "log.txt"
    log.write_text(
        "ImportError while loading conftest '/r/tests/boot/conftest.py'.\n"
        "tests/boot/conftest.py:1: in <module>\n    from mathkit import registry\n"
        "src/mathkit/registry.py:3: in <module>\n    raise ImportError('no backend')\n"
        "E   ImportError: no backend\n"
    )
    broken = StageResult(
        stage="S-PyTorch-1", shard=1, shards=1, state="ERROR", started_at=None,
        finished_at=None, duration_s=1.0, gpu_type="CPU", gpus=[], tests=[],
        log_path=str(log), evidence="pytest ended with a usage error (exit 4): ImportError: x",
    )  # fmt: skip
    base = {("S-PyTorch", "tests/boot/check_a.py::a"): Outcome("x", "passed", 1)}
    changed = ["src/mathkit/registry.py", "README.md"]
    (failure,) = analyse([broken], base=base, base_pipeline=4, changed_files=changed).failures
    assert failure.category == "NEW", failure
    assert failure.note == "no test ran here; 1 test(s) of S-PyTorch passed on base #4"
    assert [str(s) for s in failure.suspects] == ["src/mathkit/registry.py (in traceback)"]
    other = {("A10-PyTorch", "tests/boot/check_a.py::a"): Outcome("x", "passed", 1)}
    (alone,) = analyse([broken], base=other, base_pipeline=4, changed_files=changed).failures
    assert alone.category == "UNCLASSIFIED"  # the control: the base never ran this family


@pytest.mark.parametrize(
    ("base", "category", "note"),
    [
        pytest.param(
            {
                ("S-PyTorch", "t/check_x.py::a"): Outcome("t/check_x.py::a", "passed", 1),
                ("S-PyTorch", "t/check_x.py::b"): Outcome("t/check_x.py::b", "passed", 1),
                ("S-PyTorch", "t/check_y.py::c"): Outcome("t/check_y.py::c", "passed", 1),
            },
            "NEW",
            "hides 2 test(s) that passed on base #9: a, b",
            id="its tests passed on the base: NEW, naming them",
        ),
        pytest.param(
            {("S-PyTorch", "t/check_y.py::c"): Outcome("t/check_y.py::c", "passed", 1)},
            "UNCLASSIFIED",
            "base #9 did not run this file in S-PyTorch",
            id="the base never ran it",
        ),
        pytest.param(
            {("S-PyTorch", "t/check_x.py"): Outcome("t/check_x.py", "error", 0)},
            "PRE-EXISTING",
            "also failing on base #9",
            id="the base failed to import it too",
        ),
    ],
)
def test_a_collection_error_is_the_failure_of_the_tests_it_hides(base, category, note) -> None:
    error = "ImportError: cannot import name 'f' from 'm' (/r/m.py)"
    tests = [Outcome("t/check_x.py", "error", 0, error)]
    (failure,) = analyse([shard(tests=tests)], base=base, base_pipeline=9).failures
    assert (failure.category, failure.note) == (category, note)
    assert failure.signature == f"collection error: import: {error}"


def test_the_suites_own_verdict_is_a_blocking_failure() -> None:
    verdict = Outcome("(pytest session)", "failed", 0, "[nvfp4_moe] FAIL forced backend: cute")
    base = {("S-PyTorch", "t.py::a"): Outcome("t.py::a", "passed", 1)}
    (failure,) = analyse([shard(tests=[verdict])], base=base, base_pipeline=2).failures
    assert failure.category == "NEW" and failure.evidence.startswith("[nvfp4_moe] FAIL")
    assert analyse([shard(tests=[verdict])]).exit_code == 1


@pytest.mark.parametrize(
    ("outcome", "base_outcome", "category", "note"),
    [
        ("failed", "failed", "PRE-EXISTING", "also failing on base #3"),
        ("failed", "error", "PRE-EXISTING", "also failing on base #3"),
        ("error", "failed", "PRE-EXISTING", "also failing on base #3"),
        ("error", "error", "PRE-EXISTING", "also failing on base #3"),
        ("failed", "passed", "NEW", "passed on base #3 in 1.00 s"),
        ("error", "passed", "NEW", "passed on base #3 in 1.00 s"),
        ("failed", "skipped", "NEW", "new coverage: did not run on base #3 (skipped there)"),
        ("failed", None, "UNCLASSIFIED", "base #3 did not run this test in S-PyTorch"),
    ],
)
def test_the_base_outcome_decides_new_or_pre_existing(outcome, base_outcome, category, note):
    """A test that errored on the base (a fixture broke, say) fails there too: PRE-EXISTING."""
    key = ("S-PyTorch", "t.py::x")
    base = {} if base_outcome is None else {key: Outcome("t.py::x", base_outcome, 1)}
    tests = [Outcome("t.py::x", outcome, 1, "AssertionError: x")]
    (failure,) = analyse([shard(tests=tests)], base=base, base_pipeline=3).failures
    assert (failure.category, failure.note) == (category, note)


NCCL = "RuntimeError: NCCL error in: X.cpp:1, unhandled system error"


def test_counts_not_run_and_which_failures_name_suspects() -> None:
    tests = [
        Outcome("src/t.py::ok", "passed", 1),  # passed tests are passed over, not the end
        Outcome("src/t.py::infra", "error", 1, NCCL),
        Outcome("src/t.py::new", "failed", 1, "AssertionError: x"),
        Outcome("src/t.py::flaky", "flaky", 1, "passed on re-run 1 after: AssertionError: y", 2),
        Outcome("src/t.py::mute", "failed", 1),
    ]
    base = {
        ("S-PyTorch", "src/t.py::new"): Outcome("src/t.py::new", "passed", 1),
        ("S-PyTorch", "src/t.py::mute"): Outcome("src/t.py::mute", "failed", 1),
    }
    analysis = analyse(
        [
            shard(tests=tests),
            shard("S-PyTorch-2", "ERROR", [tests[3]], "crashed: pytest killed by SIGKILL"),
            shard("S-PyTorch-3", "NOT_RUN", evidence="needs 4 x H200 GPU(s)"),
            shard("S-PyTorch-4", "NOT_RUN"),
        ],
        base=base,
        base_pipeline=3,
        changed_files=["src/a.py"],
        stage_paths={"S-PyTorch-1": ["src/"]},
    )
    assert analysis.counts() == {
        "NEW": 1,
        "PRE-EXISTING": 1,
        "UNCLASSIFIED": 0,
        "INFRA": 2,  # the NCCL error, and shard 2: a flaky test does not explain its crash
        "FLAKY": 2,
        "WAIVED": 0,
    }
    assert [f.test_id for f in analysis.of("NEW")] == ["src/t.py::new"]
    assert {f.test_id: f.suspects for f in analysis.of("INFRA")} == {
        "src/t.py::infra": (),  # suspects are named for NEW failures only
        "S-PyTorch-2 (whole shard)": (),
    }
    assert analysis.of("NEW")[0].suspects
    assert analysis.of("INFRA")[-1].attempts == 1
    assert analysis.of("PRE-EXISTING")[0].evidence == "failed (no error text was captured)"
    assert analysis.not_run == [
        ("S-PyTorch-3", "needs 4 x H200 GPU(s)"),
        ("S-PyTorch-4", "not run"),
    ]


def test_a_refused_local_service_the_pr_changed_is_new(tmp_path) -> None:
    """Shard-wide "connection refused" is the machine's, unless the evidence says it is the
    suite's own service: no host but this one, in tests that passed on the base and import a
    changed file."""
    (tmp_path / "svc.py").write_text("PORT = 1\n")
    (tmp_path / "other.py").write_text("X = 1\n")
    for name in ("check_a.py", "check_b.py"):
        (tmp_path / name).write_text("import svc\n")
    (tmp_path / "check_c.py").write_text("import other\n")
    local = "ConnectionRefusedError: [Errno 111] Connection refused"
    remote = (
        "requests.exceptions.ConnectionError: HTTPConnectionPool(host='cache.ci.internal', "
        "port=80): Max retries exceeded [Errno 111] Connection refused"
    )
    ids = ["check_a.py::t1", "check_a.py::t2", "check_b.py::t3"]
    base = {("S-PyTorch", t): Outcome(t, "passed", 1) for t in [*ids, "check_c.py::t4"]}

    def categories(evidence: str, changed: list[str], tests=ids) -> set[str]:
        failing = [Outcome(t, "failed", 1, evidence) for t in tests]
        analysis = analyse(
            [shard(tests=failing)], base=base, base_pipeline=2, changed_files=changed, root=tmp_path
        )
        return {f.category for f in analysis.failures}

    assert categories(local, ["svc.py"]) == {"NEW"}
    # the controls: a named host elsewhere, or tests that import nothing the PR changed
    assert categories(remote, ["svc.py"]) == {"INFRA"}
    assert categories(local, ["other.py"]) == {"INFRA"}
    assert categories(local, ["svc.py"], ["check_c.py::t4", *ids[:2]]) == {"NEW", "INFRA"}


def test_ranks_past_the_suites_limit_are_the_machines_with_the_load_and_the_limit() -> None:
    """What harness/suites/sharding_ir/spawn.py raises for ranks past its limit: INFRA (exit 3),
    its limit in the signature, the load the test's log recorded (the plugin's section) in the
    note."""
    why = "rank 1: still running when the limit ran out"
    evidence = (
        "stagebot.harness.suites.sharding_ir.spawn.SpawnTimeout: 2 ranks (gloo) timed out after "
        "31.2 s of run (limit 30 s: set by --sharding-ir-rank-timeout); load average 17.52 on "
        f"2 CPUs: {why}"
    )
    log = (
        f"E   {evidence}\n--- {why} ---\n\n----- stagebot: load -----\nload average 17.52 on 2 CPUs"
    )
    test = Outcome("t.py::test_shard", "failed", 31, evidence)
    analysis = analyse([shard(tests=[test])], logs={("S-PyTorch-1", "t.py::test_shard"): log})
    (failure,) = analysis.failures
    assert (failure.category, analysis.exit_code) == ("INFRA", 3)
    assert failure.signature == (
        "time limit: 2 ranks timed out after 31.2 s of run (limit 30 s: set by "
        "--sharding-ir-rank-timeout)"
    )
    assert "(load average 17.52 on 2 CPUs): retry" in failure.note
    # the control: a full disk is not a limit that ran out; its note says nothing of the load
    disk = "OSError: [Errno 28] No space left on device"
    test = Outcome("t.py::test_save", "failed", 1, disk)
    logs = {("S-PyTorch-1", "t.py::test_save"): f"E   {disk}" + log[log.index("\n\n-----") :]}
    (full,) = analyse([shard(tests=[test])], logs=logs).failures
    assert full.note == "the disk is full ([Errno 28] ENOSPC): retry"


HUB_KERNELS = "/venv/lib/python3.11/site-packages/transformers/integrations/hub_kernels.py"
SHADOWED = (
    "ImportError: cannot import name 'CUDAProperties' from 'kernels' (/repo/kernels/__init__.py)"
)


def _import_failure(test_id: str, raised_in: str, error: str = SHADOWED) -> tuple[Outcome, str]:
    """A test that failed as pytest reports an import error raised in ``raised_in``."""
    log = (
        "    def test():\n>       import transformers.activations\n\n"
        f"{raised_in}:104: in <module>\n    from kernels import (\nE   {error}\n\n{raised_in}:104: "
        + error.split(":")[0]
    )
    return Outcome(test_id, "failed", 1, error), log


def test_an_installed_package_failing_to_import_is_one_environment_entry() -> None:
    """Many tests, one cause: the package and its version named, the shadowing folder too."""
    failed = [_import_failure(f"t{i}.py::test_{i}", HUB_KERNELS) for i in range(4)]
    result = shard(tests=[outcome for outcome, _ in failed])
    result = StageResult(**{**result.__dict__, "environment": ["transformers==5.25.0"]})
    logs = {(result.stage, outcome.test_id): log for outcome, log in failed}
    analysis = analyse([result], logs=logs)
    (failure,) = analysis.failures
    assert failure.category == "INFRA" and analysis.exit_code == 3
    assert failure.signature.startswith(
        "environment: transformers 5.25.0 fails to import: ImportError: cannot import name"
    )
    assert (
        "'kernels' came from /repo/kernels/__init__.py, outside site-packages" in failure.signature
    )
    assert "install the versions that were tested" in failure.note
    assert failure.collateral == ("t1.py::test_1", "t2.py::test_2", "t3.py::test_3")


@pytest.mark.parametrize(
    "raised_in, error",
    [
        pytest.param("/repo/mypkg/loader.py", SHADOWED, id="raised in the repository's code"),
        pytest.param(HUB_KERNELS, "AttributeError: 'NoneType' object", id="not an import error"),
    ],
)
def test_other_failures_in_installed_code_are_not_the_environments(raised_in, error) -> None:
    outcome, log = _import_failure("t.py::test", raised_in, error)
    result = shard(tests=[outcome])
    analysis = analyse([result], logs={(result.stage, outcome.test_id): log})
    (failure,) = analysis.failures
    assert failure.category == "UNCLASSIFIED", failure
