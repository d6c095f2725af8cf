"""The promise of flakiness in a branch's history (``flaky_history``), stated as a property over
many pipelines (issue 50): a test was flaky in a pipeline when it passed there only on a re-run
(``flaky``), or when it failed or errored there while another pipeline at the same commit passed
it; skipped, waived and xfailed outcomes are neither a pass nor a failure. Its evidence
(``flaky_evidence``) is how the test failed in those pipelines."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stagebot.harness.analysis.flakiness import flaky_evidence, flaky_history
from stagebot.harness.ledger.book import Ledger
from stagebot.harness.results import TEST_OUTCOMES, StageResult
from stagebot.harness.results import TestOutcome as Outcome

RUN = {"version": 1, "command": "run", "options": {}}
FAILURES = ("failed", "error")  # what counts as a failure in the history
PIPELINE = st.tuples(
    st.sampled_from(["c1", "c2"]),  # commit
    st.sampled_from(["main", "feature"]),  # branch
    st.dictionaries(st.sampled_from(["t.py::a", "t.py::b"]), st.sampled_from(TEST_OUTCOMES)),
)


def expected(pipelines, branch: str) -> dict[tuple[str, str], tuple[int, ...]]:
    found: dict[tuple[str, str], set[int]] = {}
    on_branch = [(n, p) for n, p in enumerate(pipelines, start=1) if p[1] == branch]
    for number, (commit, _, outcomes) in on_branch:
        for test, outcome in outcomes.items():
            passed_elsewhere = any(
                other_commit == commit and other.get(test) == "passed"
                for _, (other_commit, _, other) in on_branch
            )
            if outcome == "flaky" or (outcome in FAILURES and passed_elsewhere):
                found.setdefault(("CPU-PyTorch", test), set()).add(number)
    return {key: tuple(sorted(numbers)) for key, numbers in found.items()}


def record(book: Ledger, pipelines) -> None:
    for commit, pipeline_branch, outcomes in pipelines:
        number = book.start_pipeline(command=RUN, commit=commit, branch=pipeline_branch)
        tests = [Outcome(test, outcome, 1.0) for test, outcome in outcomes.items()]
        state = "FAILURE" if any(o in FAILURES for o in outcomes.values()) else "SUCCESS"
        result = StageResult("CPU-PyTorch-1", 1, 1, state, None, None, 1.0, "CPU", [], tests)
        book.record_result(number, result)
        book.finish_pipeline(number, state)


@settings(max_examples=60, deadline=None)
@given(pipelines=st.lists(PIPELINE, max_size=6), branch=st.sampled_from(["main", "feature"]))
def test_flaky_means_passed_on_a_rerun_or_both_ways_at_one_commit(
    tmp_path_factory, pipelines, branch
) -> None:
    with Ledger.open(tmp_path_factory.mktemp("ledger") / "ledger.sqlite") as book:
        record(book, pipelines)
        assert flaky_history(book, branch) == expected(pipelines, branch)


@pytest.mark.parametrize("outcome", TEST_OUTCOMES)
@pytest.mark.parametrize("commit", ["c1", "c2"])
def test_each_outcome_beside_a_pass(tmp_path, outcome, commit) -> None:
    """Every outcome, at the passing pipeline's commit and at another one."""
    pipelines = [("c1", "main", {"t.py::a": outcome}), (commit, "main", {"t.py::a": "passed"})]
    with Ledger.open(tmp_path / "ledger.sqlite") as book:
        record(book, pipelines)
        flaky = flaky_history(book, "main")
    assert flaky == expected(pipelines, "main")
    assert bool(flaky) == (outcome == "flaky" or (outcome in FAILURES and commit == "c1"))


@pytest.mark.parametrize(
    ("outcome", "evidence", "shown"),
    [
        # a re-run pass names how the first attempt failed, whatever that message says
        (
            "flaky",
            "passed on re-run 1 after: AssertionError: x after: y",
            "AssertionError: x after: y",
        ),
        ("flaky", "passed on re-run 1", "passed on re-run 1"),
        # a failure beside a pass at the same commit is its own evidence, whole
        ("failed", "AssertionError: waited after: 3 s", "AssertionError: waited after: 3 s"),
        ("error", "RuntimeError: setup after: teardown", "RuntimeError: setup after: teardown"),
    ],
)
def test_the_evidence_of_a_flaky_run_is_how_it_failed_there(tmp_path, outcome, evidence, shown):
    with Ledger.open(tmp_path / "ledger.sqlite") as book:
        number = book.start_pipeline(command=RUN, commit="c1", branch="main")
        tested = [Outcome("t.py::a", outcome, 1.0, evidence)]
        result = StageResult("CPU-PyTorch-1", 1, 1, "FAILURE", None, None, 1.0, "CPU", [], tested)
        book.record_result(number, result)
        book.finish_pipeline(number, "FAILURE")
        record(book, [("c1", "main", {"t.py::a": "passed"})])
        assert flaky_evidence(book, "main") == {("CPU-PyTorch", "t.py::a"): (shown,)}
