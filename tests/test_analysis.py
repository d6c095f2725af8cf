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
            [], "NOT_RUN", "0 tests executed", False, ("NOT_RUN", 4), id="nothing ran: its own state"
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
