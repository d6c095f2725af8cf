"""The promises of the ledger's trust query for reuse by key (``Ledger.trusted_passes``), stated
as properties over many pipelines (issue 50):

- no pipeline of another PR is ever a source of reuse, whatever the branch fields say; without
  a PR (a local run) only post-merge runs of the default branch and the same branch's own
  runs without a PR are;
- only a passed outcome is reusable, and only when it is the newest trusted run of the test;
- the whole answer equals a plain statement of the rule (``expected``)."""

from __future__ import annotations

import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st

from stagebot.harness.ledger.book import Ledger
from stagebot.harness.ledger.keys import RecordedKey
from stagebot.harness.ledger.schema import SCHEMA
from stagebot.harness.results import TEST_OUTCOMES, StageResult
from stagebot.harness.results import TestOutcome as Outcome

RUN = {"version": 1, "command": "run", "options": {}}
FAMILY = "CPU-PyTorch"
PARTS = dict.fromkeys(("test", "files", "suite_args", "catalog", "environment", "gpu"), "d")
TESTS = ("t.py::a", "t.py::b", "t.py::c")
BRANCHES = ("main", "feature", "topic", None)
PRS = (None, 1, 2)

PIPELINE = st.tuples(
    st.sampled_from(PRS),
    st.sampled_from(BRANCHES),
    st.lists(st.tuples(st.sampled_from(TESTS), st.sampled_from(TEST_OUTCOMES)), max_size=3),
)


def record(book: Ledger, pr, branch, outcomes) -> int:
    number = book.start_pipeline(command=RUN, commit="c1", pr=pr, branch=branch)
    tests = dict(outcomes)  # one outcome per test in one shard
    result = StageResult(
        "CPU-PyTorch-1",
        1,
        1,
        "SUCCESS",
        None,
        None,
        1.0,
        "CPU",
        [],
        [Outcome(test, outcome, 1.0) for test, outcome in tests.items()],
    )
    keys = [RecordedKey(test, FAMILY, f"k-{test}", PARTS, None, "t.py") for test in tests]
    book.record_result(number, result, keys=keys)
    return number


def trusted(pipeline_pr, pipeline_branch, pr, branch) -> bool:
    """The trust rule, as docs/reuse.md states it."""
    if pipeline_pr is None and pipeline_branch == "main":
        return True  # a post-merge pipeline of the default branch
    if pr is not None:
        return pipeline_pr == pr  # the same PR's earlier pipelines
    return pipeline_pr is None and pipeline_branch == branch  # a local run's own branch


def expected(pipelines, pr, branch) -> dict[str, int]:
    newest: dict[str, tuple[int, str]] = {}
    for number, (pipeline_pr, pipeline_branch, outcomes) in enumerate(pipelines, start=1):
        if trusted(pipeline_pr, pipeline_branch, pr, branch):
            for test, outcome in dict(outcomes).items():
                newest[test] = (number, outcome)
    return {test: number for test, (number, outcome) in newest.items() if outcome == "passed"}


@settings(max_examples=60, deadline=None)
@given(
    pipelines=st.lists(PIPELINE, max_size=6),
    pr=st.sampled_from(PRS),
    branch=st.sampled_from(BRANCHES),
)
def test_reuse_trusts_main_and_the_askers_own_runs_and_only_their_passes(
    tmp_path_factory, pipelines, pr, branch
) -> None:
    with Ledger.open(tmp_path_factory.mktemp("ledger") / "ledger.sqlite") as book:
        for pipeline in pipelines:
            record(book, *pipeline)
        found = book.trusted_passes(FAMILY, pr=pr, branch=branch, default_branch="main")
    sources = {test: hit.pipeline for test, hit in found.items()}
    for test, hit in found.items():
        source_pr, source_branch, outcomes = pipelines[hit.pipeline - 1]
        # no pipeline of another PR, whatever its branch; only a passed outcome
        assert source_pr is None or source_pr == pr, (test, hit)
        assert dict(outcomes)[test] == "passed", (test, hit)
        assert hit.on_main == (source_pr is None)
    assert sources == expected(pipelines, pr, branch)


def test_a_prs_run_on_the_askers_branch_is_not_trusted_without_a_pr(tmp_path) -> None:
    """A local run of branch ``feature`` never trusts a PR pipeline that names ``feature``."""
    with Ledger.open(tmp_path / "ledger.sqlite") as book:
        record(book, 5, "feature", [("t.py::a", "passed")])
        assert book.trusted_passes(FAMILY, pr=None, branch="feature", default_branch="main") == {}


def test_every_outcome_but_passed_is_not_reusable(tmp_path) -> None:
    with Ledger.open(tmp_path / "ledger.sqlite") as book:
        for outcome in TEST_OUTCOMES:
            record(book, None, "main", [("t.py::a", outcome)])
            found = book.trusted_passes(FAMILY, pr=None, branch=None, default_branch="main")
            assert ("t.py::a" in found) == (outcome == "passed"), outcome


SOURCE = st.one_of(st.none(), st.tuples(st.sampled_from(PRS), st.sampled_from(BRANCHES)))


@settings(max_examples=60, deadline=None)
@given(
    asker=st.tuples(st.sampled_from(PRS), st.sampled_from(BRANCHES)),
    sources=st.lists(SOURCE, min_size=1, max_size=4),
)
def test_a_reuse_by_key_names_its_source_and_whether_it_was_mains(tmp_path_factory, asker, sources):
    """What a pipeline reused by key, from where: a source is the pipeline's own kind (the same
    PR; without a PR, the same branch's runs without one) or else main's, which includes a
    source this ledger lacks (main's ledger holds it)."""
    with Ledger.open(tmp_path_factory.mktemp("ledger") / "ledger.sqlite") as book:
        numbers = [
            None if source is None else record(book, *source, [("t.py::x", "passed")])
            for source in sources
        ]
        numbers = [90 + index if n is None else n for index, n in enumerate(numbers)]
        pipeline = book.start_pipeline(command=RUN, commit="c2", pr=asker[0], branch=asker[1])
        reused = {f"t.py::r{index}": (number, 1.0) for index, number in enumerate(numbers)}
        result = StageResult("CPU-PyTorch-1", 1, 1, "SUCCESS", None, None, 1.0, "CPU", [], [])
        book.record_result(pipeline, result, key_reused=reused)
        assert book.key_reused(pipeline) == [
            ("CPU-PyTorch-1", test, number) for test, (number, _) in sorted(reused.items())
        ]
        found = book.key_reuse_sources(pipeline)
    counts: dict[int, int] = {}
    own: dict[int, bool] = {}
    for source, number in zip(sources, numbers, strict=True):
        counts[number] = counts.get(number, 0) + 1
        same_pr = source is not None and source[0] is not None and source[0] == asker[0]
        same_branch = source is not None and asker[0] is None and source[0] is None
        own[number] = same_pr or (same_branch and source[1] == asker[1])
    assert found == [(number, not own[number], counts[number]) for number in sorted(counts)]


def test_a_version_1_ledger_offers_and_names_no_reuse_by_key(tmp_path) -> None:
    """A ledger of before reuse by key (schema version 1), read without migrating it: every
    question about keys has the empty answer, never an error about the tables it lacks."""
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)
        db.execute(
            "INSERT INTO pipelines (repo, number, command, state, started_at, branch)"
            " VALUES ('local', 1, '{}', 'SUCCESS', 'now', 'main')"
        )
        db.execute("INSERT INTO tests VALUES (1, 'S-1', 't::a', 'passed', 1.0, NULL, 1, 7, NULL)")
        db.execute("PRAGMA user_version = 1")
    with Ledger.open(path, readonly=True) as old:
        assert old.version == 1
        assert old.trusted_passes(FAMILY, pr=None, branch="main", default_branch="main") == {}
        assert old.key_reused(1) == [] and old.key_reuse_sources(1) == []
        assert old.reuse_faults() == [] and old.reuse_faults(1) == []
        assert old.latest_key("t::a") is None
