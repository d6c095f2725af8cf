"""The ledger's dependency keys: recorded with a shard's outcomes, the trust rule of the lookup,
reuse faults, and the migration of a version-1 ledger."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from stagebot.harness.ledger.book import Ledger
from stagebot.harness.ledger.keys import RecordedKey
from stagebot.harness.ledger.schema import SCHEMA, SCHEMA_VERSION
from stagebot.harness.results import StageResult
from stagebot.harness.results import TestOutcome as Outcome

RUN = {"version": 1, "command": "run", "options": {}}
FAMILY = "CPU-PyTorch"
PARTS = {"test": "t", "files": "f", "suite_args": "s", "catalog": "c", "environment": "e"}


def shard(tests, state="SUCCESS", stage="CPU-PyTorch-1") -> StageResult:
    return StageResult(stage, 1, 1, state, None, None, 1.0, "CPU", [], list(tests))


def key(test_id: str, digest: str = "k1", conservative: str | None = None) -> RecordedKey:
    return RecordedKey(test_id, FAMILY, digest, {**PARTS, "gpu": "g"}, conservative, "t.py")


def run(book: Ledger, *, pr=None, branch=None, tests=("t.py::a",), outcome="passed") -> int:
    number = book.start_pipeline(command=RUN, commit=f"c{pr}{branch}", pr=pr, branch=branch)
    outcomes = [Outcome(t, outcome, 2.0) for t in tests]
    book.record_result(number, shard(outcomes), keys=[key(t) for t in tests])
    return number


@pytest.fixture
def book(tmp_path: Path) -> Ledger:
    return Ledger.open(tmp_path / "ledger.sqlite")


def passes(book: Ledger, pr=None, branch=None) -> dict[str, int]:
    found = book.trusted_passes(FAMILY, pr=pr, branch=branch, default_branch="main")
    return {test: hit.pipeline for test, hit in found.items()}


def test_keys_are_recorded_only_for_tests_with_an_outcome(book: Ledger) -> None:
    """A shard cut off after test a: b has no outcome, so no key (nothing to reuse it by)."""
    number = book.start_pipeline(command=RUN, commit="c1", branch="main")
    book.record_result(
        number,
        shard([Outcome("t.py::a", "passed", 1.0)], "ERROR"),
        keys=[key("t.py::a"), key("t.py::b")],
        key_files={"t.py": {"t.py": "d1", "m.py": "d2"}},
    )
    assert set(passes(book, branch="main")) == {"t.py::a"}
    latest = book.latest_key("t.py::a")
    assert (latest.pipeline, latest.outcome, latest.files) == (
        number,
        "passed",
        {"t.py": "d1", "m.py": "d2"},
    )
    assert book.latest_key("t.py::b") is None


def test_the_lookup_trusts_main_and_the_same_pr_never_another_pr(book: Ledger) -> None:
    main = run(book, branch="main", tests=("t.py::m",))
    mine = run(book, pr=4, branch="feature", tests=("t.py::a",))
    theirs = run(book, pr=5, branch="feature", tests=("t.py::b",))
    local = run(book, branch="topic", tests=("t.py::c",))
    assert passes(book, pr=4) == {"t.py::m": main, "t.py::a": mine}
    assert passes(book, pr=5) == {"t.py::m": main, "t.py::b": theirs}
    assert passes(book, pr=6) == {"t.py::m": main}
    # without a PR (a local `bot run`): main's and the same branch's own runs
    assert passes(book, branch="topic") == {"t.py::m": main, "t.py::c": local}
    assert passes(book, branch="other") == {"t.py::m": main}


def test_the_newest_run_decides_and_a_failure_is_never_reused(book: Ledger) -> None:
    run(book, branch="main")
    run(book, branch="main", outcome="failed")
    assert passes(book, branch="main") == {}
    newest = run(book, branch="main")
    assert passes(book, branch="main") == {"t.py::a": newest}


def test_a_reuse_fault_stops_reuse_by_key_of_that_test(book: Ledger) -> None:
    source = run(book, branch="main", tests=("t.py::a", "t.py::b"))
    book.record_fault(FAMILY, "t.py::a", source + 1, source, "reused as passed, failed")
    assert passes(book, branch="main") == {"t.py::b": source}
    assert book.reuse_faults() == [
        (FAMILY, "t.py::a", source + 1, source, "reused as passed, failed")
    ]


def test_tests_reused_by_key_name_their_source_and_how(book: Ledger) -> None:
    main = run(book, branch="main", tests=("t.py::a", "t.py::b"))
    mine = run(book, pr=4, tests=("t.py::c",))
    number = book.start_pipeline(command=RUN, commit="c9", pr=4)
    book.record_result(
        number,
        shard([Outcome("t.py::d", "passed", 1.0)]),
        key_reused={"t.py::a": (main, 2.0), "t.py::b": (main, 2.0), "t.py::c": (mine, 2.0)},
        reused_tests={"t.py::e": (mine, 1.0)},
    )
    assert book.key_reuse_sources(number) == [(main, True, 2), (mine, False, 1)]
    rows = book.connection.execute(
        "SELECT test_id, reused_from, reused_by FROM tests t JOIN pipelines p"
        " ON p.id = t.pipeline_id WHERE p.number = ? ORDER BY test_id",
        (number,),
    ).fetchall()
    assert [tuple(r) for r in rows] == [
        ("t.py::a", main, "key"),
        ("t.py::b", main, "key"),
        ("t.py::c", mine, "key"),
        ("t.py::d", None, None),
        ("t.py::e", mine, "commit"),
    ]


def test_a_version_1_ledger_is_migrated_and_read_only_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)
        db.execute(
            "INSERT INTO pipelines (repo, number, command, state, started_at, branch)"
            " VALUES ('local', 1, '{}', 'SUCCESS', 'now', 'main')"
        )
        db.execute("INSERT INTO tests VALUES (1, 'S-1', 't::a', 'passed', 1.0, NULL, 1, 7, NULL)")
        db.execute(
            "INSERT INTO tests VALUES (1, 'S-1', 't::b', 'passed', 1.0, NULL, 1, NULL, NULL)"
        )
        db.execute("PRAGMA user_version = 1")
    with Ledger.open(path, readonly=True) as old:
        assert (
            old.version == 1
            and old.trusted_passes(FAMILY, pr=None, branch="main", default_branch="main") == {}
        )
        assert old.latest_key("t::a") is None and old.key_reuse_sources(1) == []
    with Ledger.open(path) as book:
        assert book.version == SCHEMA_VERSION == 2
        rows = book.connection.execute("SELECT test_id, reused_by FROM tests ORDER BY test_id")
        assert [tuple(r) for r in rows] == [("t::a", "commit"), ("t::b", None)]
        run(book, branch="main")  # the new tables are there
        assert set(passes(book, branch="main")) == {"t.py::a"}
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2


def test_a_test_the_shard_ran_keeps_its_outcome_whatever_was_claimed(book: Ledger) -> None:
    source = run(book, branch="main")
    number = book.start_pipeline(command=RUN, commit="c2", branch="main")
    failed = Outcome("t.py::a", "failed", 1.0, "AssertionError")
    book.record_result(number, shard([failed], "FAILURE"), key_reused={"t.py::a": (source, 1.0)})
    (row,) = book.connection.execute(
        "SELECT outcome, reused_by FROM tests t JOIN pipelines p ON p.id = t.pipeline_id"
        " WHERE p.number = ?",
        (number,),
    ).fetchall()
    assert tuple(row) == ("failed", None)
