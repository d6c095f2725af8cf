"""Failure analysis: evidence, numeric mismatches, categories, pipeline state, exit code."""

from __future__ import annotations

import pytest

from stagebot.harness.analysis import analyse, is_infra
from stagebot.harness.evidence import error_line, log_error_line, mismatch, test_evidence
from stagebot.harness.results import StageResult
from stagebot.harness.results import TestOutcome as Outcome


def shard(stage="S-PyTorch-1", state="FAILURE", tests=(), evidence=None) -> StageResult:
    return StageResult(
        stage, 1, 1, state, None, None, 1.0, "CPU", [], list(tests), evidence=evidence
    )


def test_real_torch_assert_close_message() -> None:
    torch = pytest.importorskip("torch")
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
        Outcome("t.py::flaky", "flaky", 1, "passed on re-run 1", 2),
        Outcome("t.py::oom", "error", 1, "torch.OutOfMemoryError: CUDA out of memory"),
        Outcome("t.py::waived", "waived", 0, "bug 1"),
        Outcome("t.py::ok", "passed", 1),
    ]
    base = {
        "t.py::new": Outcome("t.py::new", "passed", 1),
        "t.py::old": Outcome("t.py::old", "failed", 1),
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
        "oom": "INFRA",
        "waived": "WAIVED",
    }
    assert got["old"].note == "also failing on base #3"
    assert got["unseen"].note == "base #3 did not run this test"
    assert got["new"].suspects == ("t_helpers.py", "src/a.py")  # same folder / run_if_changed
    assert (analysis.state, analysis.exit_code) == ("FAILURE", 1)
    assert analyse([shard(tests=tests[:1])]).failures[0].category == "UNCLASSIFIED"


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
            [Outcome("a::b", "error", 1, "timeout: still running")],
            "ERROR",
            "timeout: killed",
            False,
            ("FAILURE", 3),
            id="infra only exits 3",
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
            [Outcome("a::b", "failed", 1, "RuntimeError: NCCL error")],
            "FAILURE",
            None,
            False,
            ("FAILURE", 3),
            id="NCCL is infra",
        ),
        pytest.param(
            [Outcome("a::b", "passed", 1)], "SUCCESS", None, True, ("ABORTED", 1), id="cancelled"
        ),
        pytest.param(
            [], "NOT_RUN", "0 tests executed", False, ("SUCCESS", 0), id="not run is not a failure"
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


@pytest.mark.parametrize(
    ("evidence", "infra"),
    [
        ("AssertionError: expected 2 NCCL all-reduce calls, got 3", False),
        ("AssertionError: OOM guard did not trigger (out of memory expected)", False),
        ("assert oom_count == 0", False),
        ("AssertionError: CUDA out of memory was expected, the call succeeded", False),
        ("torch.testing.AssertionError: NCCL error count 2 != 0", False),
        ("AssertionError: checked\nRuntimeError: NCCL error in: ProcessGroupNCCL.cpp:3", True),
        ("  RuntimeError: CUDA out of memory. Tried to allocate 8.00 GiB", True),
        ("ValueError: the ProcessGroup size must be 4, not 3", False),
        ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error", True),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", True),
        ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3", True),
        ("timeout: still running when the shard was killed after 60 s", True),
        ("crashed: the worker was killed by SIGKILL during this test", True),
    ],
)
def test_infra_is_read_from_a_line_start_never_an_assertion(evidence, infra) -> None:
    assert is_infra(evidence) is infra
    tests = [Outcome("t.py::x", "failed", 1, evidence)]
    analysis = analyse([shard(tests=tests)])
    assert analysis.failures[0].category == ("INFRA" if infra else "UNCLASSIFIED")
    assert analysis.exit_code == (3 if infra else 1)  # a real failure never exits 3


@pytest.mark.parametrize(
    ("outcome", "base_outcome", "category", "note"),
    [
        ("failed", "failed", "PRE-EXISTING", "also failing on base #3"),
        ("failed", "error", "PRE-EXISTING", "also failing on base #3"),
        ("error", "failed", "PRE-EXISTING", "also failing on base #3"),
        ("error", "error", "PRE-EXISTING", "also failing on base #3"),
        ("failed", "passed", "NEW", "passed on base #3"),
        ("error", "passed", "NEW", "passed on base #3"),
        ("failed", "skipped", "NEW", None),
        ("failed", None, "UNCLASSIFIED", "base #3 did not run this test"),
    ],
)
def test_the_base_outcome_decides_new_or_pre_existing(outcome, base_outcome, category, note):
    """A test that errored on the base (a fixture broke, say) fails there too: PRE-EXISTING."""
    base = {} if base_outcome is None else {"t.py::x": Outcome("t.py::x", base_outcome, 1)}
    tests = [Outcome("t.py::x", outcome, 1, "AssertionError: x")]
    (failure,) = analyse([shard(tests=tests)], base=base, base_pipeline=3).failures
    assert (failure.category, failure.note) == (category, note)


def test_an_error_shard_is_listed_once_whatever_its_tests_say() -> None:
    timed_out = [Outcome("a::b", "error", 1, "timeout: still running")]
    (only,) = analyse([shard(state="ERROR", tests=timed_out, evidence="timeout: killed")]).failures
    assert only.test_id == "a::b"  # the test already carries the infra evidence
    then_failed = [*timed_out, Outcome("a::c", "failed", 1, "AssertionError: x")]
    listed = analyse([shard(state="ERROR", tests=then_failed, evidence="timeout: k")]).failures
    assert sorted(f.test_id for f in listed) == ["a::b", "a::c"]
    failed = [Outcome("a::b", "failed", 1, "AssertionError: x")]
    both = analyse([shard(state="ERROR", tests=failed, evidence="crashed: SIGKILL")]).failures
    assert [(f.category, f.test_id) for f in both] == [
        ("UNCLASSIFIED", "a::b"),
        ("INFRA", "S-PyTorch-1 (whole shard)"),
    ]


def test_counts_not_run_and_which_failures_name_suspects() -> None:
    tests = [
        Outcome("src/t.py::ok", "passed", 1),  # passed tests are passed over, not the end
        Outcome("src/t.py::infra", "error", 1, "timeout: killed after 60 s"),
        Outcome("src/t.py::new", "failed", 1, "AssertionError: x"),
        Outcome("src/t.py::flaky", "flaky", 1, "passed on re-run 1", 2),
        Outcome("src/t.py::mute", "failed", 1),
    ]
    base = {
        "src/t.py::new": Outcome("src/t.py::new", "passed", 1),
        "src/t.py::mute": Outcome("src/t.py::mute", "failed", 1),
    }
    analysis = analyse(
        [
            shard(tests=tests),
            shard("S-PyTorch-2", "ERROR", [tests[3]], "crashed: SIGKILL"),
            shard("S-PyTorch-3", "NOT_RUN", evidence="needs 4 x H200 GPU(s)"),
            shard("S-PyTorch-4", "NOT_RUN"),
        ],
        base=base,
        base_pipeline=3,
        changed_files=["src/a.py"],
    )
    assert analysis.counts() == {
        "NEW": 1,
        "PRE-EXISTING": 1,
        "UNCLASSIFIED": 0,
        "INFRA": 2,  # the timeout, and shard 2: a flaky test does not explain its crash
        "FLAKY": 2,
        "WAIVED": 0,
    }
    assert [f.test_id for f in analysis.of("NEW")] == ["src/t.py::new"]
    assert {f.test_id: f.suspects for f in analysis.of("INFRA")} == {
        "src/t.py::infra": (),  # suspects are named for NEW failures only
        "S-PyTorch-2 (whole shard)": (),
    }
    assert analysis.of("NEW")[0].suspects == ("src/a.py",)
    assert analysis.of("INFRA")[-1].attempts == 1
    assert analysis.of("PRE-EXISTING")[0].evidence == "failed (no error text was captured)"
    assert analysis.not_run == [
        ("S-PyTorch-3", "needs 4 x H200 GPU(s)"),
        ("S-PyTorch-4", "not run"),
    ]
