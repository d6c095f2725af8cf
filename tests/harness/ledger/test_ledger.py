"""The SQLite ledger: numbering, round trips, reuse, durations, base pipelines, concurrency."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from stagebot.harness.analysis.flakiness import flaky_evidence, flaky_history
from stagebot.harness.ledger.book import Ledger
from stagebot.harness.ledger.schema import SCHEMA_VERSION
from stagebot.harness.ledger.store import (
    LedgerBusyError,
    LedgerError,
    UnknownPipelineError,
    retry_busy,
)
from stagebot.harness.results import StageResult
from stagebot.harness.results import TestOutcome as Outcome
from stagebot.harness.reuse.policy import record_validation

RUN = {"version": 1, "command": "run", "options": {}}


def shard(stage, state="SUCCESS", tests=(), reused_from=None) -> StageResult:
    return StageResult(
        stage,
        1,
        1,
        state,
        "2026-01-01T00:00:00+00:00",
        "2026-01-01T00:01:00+00:00",
        60.0,
        "CPU",
        [],
        list(tests),
        reused_from=reused_from,
    )


@pytest.fixture
def book(tmp_path: Path) -> Ledger:
    return Ledger.open(tmp_path / "ledger.sqlite")


def test_numbers_increase_and_results_round_trip(book: Ledger) -> None:
    first = book.start_pipeline(
        command=RUN,
        commit="c1",
        plan={"gating": True, "catalog_digest": "d1"},
        pr=4,
        branch="feature",
    )
    result = shard(
        "S-PyTorch-1",
        tests=[
            Outcome("t.py::a", "passed", 1.5),
            Outcome("t.py::b", "failed", 0.5, "AssertionError: x"),
        ],
    )
    book.record_result(first, result, logs={"t.py::b": "E   AssertionError: x"})
    book.finish_pipeline(first, "FAILURE")
    assert book.start_pipeline(command=RUN, commit="c1") == first + 1
    record = book.pipeline(first)
    assert record.results == [result] and record.state == "FAILURE" and record.gating
    assert record.logs == {("S-PyTorch-1", "t.py::b"): "E   AssertionError: x"}
    assert (record.pr, record.branch, record.catalog_digest) == (4, "feature", "d1")
    assert Ledger.open(book.path, readonly=True).pipeline(first).results == [result]


def test_prior_shard_is_the_latest_on_that_commit(book: Ledger) -> None:
    for state, passed in (("FAILURE", ["t::a"]), ("SUCCESS", ["t::a", "t::b"])):
        number = book.start_pipeline(command=RUN, commit="c1", plan={"catalog_digest": "d"})
        book.record_result(number, shard("S-1", state, [Outcome(t, "passed", 1) for t in passed]))
    latest = book.prior_shard("S-1", "c1", None)
    assert (latest.pipeline, latest.state, latest.passed_tests) == (2, "SUCCESS", ("t::a", "t::b"))
    assert book.prior_shard("S-1", "c1", 1).passed_tests == ("t::a",)
    assert book.prior_shard("S-1", "other", None) is None
    third = book.start_pipeline(command=RUN, commit="c1", plan={"catalog_digest": "d"})
    book.record_result(
        third, shard("S-1", "REUSED", reused_from=2), reused_tests=book.passed_tests(2, "S-1")
    )
    reused = book.prior_shard("S-1", "c1", None)
    assert reused.pipeline == 2 and reused.passed_tests == ("t::a", "t::b")  # points at the source


def test_durations_are_per_family_and_skip_reused_rows(book: Ledger) -> None:
    number = book.start_pipeline(command=RUN, commit="c")
    book.record_result(number, shard("CPU-PyTorch-1", tests=[Outcome("t::a", "passed", 4.0)]))
    book.record_result(number, shard("CPU-PyTorch-Fail-1", tests=[Outcome("t::z", "passed", 9)]))
    book.record_result(
        number, shard("CPU-PyTorch-2", "REUSED", reused_from=1), reused_tests={"t::old": (1, 7.0)}
    )
    assert book.durations("CPU-PyTorch") == {"t::a": 4.0}
    assert book.shard_duration("CPU-PyTorch-1") == 60.0


def test_base_pipeline_prefers_the_base_commit_then_the_default_branch(book: Ledger) -> None:
    main = book.start_pipeline(command=RUN, commit="m1", branch="main")
    book.finish_pipeline(main, "SUCCESS")
    running = book.start_pipeline(command=RUN, commit="b1", branch="main")  # never finished
    assert book.base_pipeline("b1", "main") == main
    book.finish_pipeline(running, "FAILURE")
    assert book.base_pipeline("b1", "main") == running
    assert book.base_pipeline("zz", "main", exclude=running) == main
    assert book.base_pipeline(None, None) is None


def test_validation_records_a_new_successful_pipeline(book: Ledger) -> None:
    gating = book.start_pipeline(command=RUN, commit="c1", plan={"gating": True}, pr=3)
    book.finish_pipeline(gating, "SUCCESS")
    validation = record_validation(book, "c2", None, pr=3)
    assert validation.ok and validation.source == gating and validation.source_commit == "c1"
    record = book.pipeline(validation.pipeline)
    assert (record.commit, record.state, record.validated_by) == ("c2", "SUCCESS", gating)
    assert not record_validation(book, "c2", 99).ok


@pytest.mark.parametrize("state", ["SUCCESS", "NOT_RUN"])
def test_a_pipeline_in_which_stages_did_not_run_never_validates(book: Ledger, state) -> None:
    """SUCCESS: as older stagebots recorded a gating run whose shards could not run here."""
    gating = book.start_pipeline(command=RUN, commit="c1", plan={"gating": True}, pr=3)
    book.record_result(gating, shard("S-1", "NOT_RUN"))
    book.finish_pipeline(gating, state)
    named = record_validation(book, "c2", gating, pr=3)
    latest = record_validation(book, "c2", None, pr=3)
    assert not named.ok and not latest.ok and named.pipeline is latest.pipeline is None
    why = "did not run 1 stage(s) (S-1)" if state == "SUCCESS" else "ended NOT_RUN"
    assert why in named.reason
    assert book.latest_number() == gating, "nothing was recorded"


def test_an_unknown_pipeline_is_named_with_those_that_exist(book: Ledger) -> None:
    with pytest.raises(UnknownPipelineError, match="has none yet"):
        book.require_pipeline(5)
    for _ in range(12):
        book.start_pipeline(command=RUN, commit="c1")
    with pytest.raises(UnknownPipelineError) as raised:
        book.require_pipeline(99)
    assert "pipeline #99 is not in the ledger" in str(raised.value)
    assert "it has #12, #11, #10" in str(raised.value) and "#3, …" in str(raised.value)
    assert raised.value.exit_code == 2
    assert "it has #12" in record_validation(book, "c2", 99).reason
    book.require_pipeline(3)


def test_validation_takes_the_workflow_run_number(book: Ledger) -> None:
    """In Actions the validation is numbered by its workflow run, not max + 1 (which a later
    run's plan job would then collide with)."""
    gating = book.start_pipeline(command=RUN, commit="c1", plan={"gating": True}, pr=3, number=40)
    book.finish_pipeline(gating, "SUCCESS")
    validation = record_validation(book, "c2", 40, pr=3, number=57)
    assert validation.ok and validation.pipeline == 57
    assert book.pipeline(57).validated_by == 40
    assert book.start_pipeline(command=RUN, commit="c3", pr=3, number=41) == 41


def test_the_next_number_follows_the_highest_not_the_count(book: Ledger) -> None:
    """Actions numbers pipelines by workflow run, so the ledger has gaps; a local run after them
    must not reuse a number below the highest (nor one of another repository's ledger)."""
    assert book.start_pipeline(command=RUN, commit="c1") == 1
    assert book.start_pipeline(command=RUN, commit="c1", number=7) == 7
    assert book.start_pipeline(command=RUN, commit="c1") == 8
    other = Ledger.open(book.path, repo="someone/else")
    assert other.start_pipeline(command=RUN, commit="c1") == 1


def test_a_re_recorded_shard_keeps_only_its_latest_tests(book: Ledger) -> None:
    number = book.start_pipeline(command=RUN, commit="c1")
    first = [Outcome("t::gone", "passed", 1), Outcome("t::kept", "failed", 1, "AssertionError")]
    book.record_result(number, shard("S-1", "FAILURE", first))
    book.record_result(number, shard("S-2", "SUCCESS", [Outcome("t::other", "passed", 1)]))
    book.record_result(number, shard("S-1", "SUCCESS", [Outcome("t::kept", "passed", 2)]))
    record = book.pipeline(number)
    assert [r.state for r in record.results] == ["SUCCESS", "SUCCESS"]
    assert book.passed_tests(number, "S-1") == {"t::kept": (number, 2.0)}
    assert book.passed_tests(number, "S-2") == {"t::other": (number, 1.0)}  # not another stage's
    assert book.prior_shard("S-1", "c1", None).passed_tests == ("t::kept",)
    assert sorted(test_id for _, test_id in book.test_outcomes(number)) == ["t::kept", "t::other"]


def test_a_partly_reused_shard_is_its_own_pipelines_result(book: Ledger) -> None:
    """Only a REUSED shard points at its source; one that ran (reusing some tests) is this
    pipeline's own result, whatever its reused_from says."""
    first = book.start_pipeline(command=RUN, commit="c1")
    book.record_result(first, shard("S-1", "FAILURE", [Outcome("t::a", "passed", 1)]))
    second = book.start_pipeline(command=RUN, commit="c1")
    for stage, state in (("S-1", "FAILURE"), ("S-2", "SUCCESS")):
        ran = [Outcome("t::b", "failed" if state == "FAILURE" else "passed", 1)]
        book.record_result(second, shard(stage, state, ran, reused_from=first))
    prior = book.prior_shard("S-1", "c1", None)
    assert (prior.pipeline, prior.state, prior.catalog_digest) == (second, "FAILURE", "")
    assert book.prior_shard("S-2", "c1", None).pipeline == second
    assert book.passed_tests(second, "S-2") == {"t::b": (second, 1.0)}  # passed here, not in #1


@pytest.mark.parametrize("header", [b"SQLite", b"SQLite format 3", b"PK\x03\x04"])
def test_a_file_that_is_no_sqlite_database_is_refused(tmp_path: Path, header: bytes) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(header)  # a truncated header too: shorter than SQLite's 16 bytes
    with pytest.raises(LedgerError, match="is corrupt: not an SQLite database"):
        Ledger.open(path)


def test_a_ledger_from_a_newer_stagebot_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    Ledger.open(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(LedgerError, match=f"has schema version {SCHEMA_VERSION + 1}; this"):
        Ledger.open(path)


def test_a_validation_is_never_a_base_pipeline(book: Ledger) -> None:
    """`/bot reuse-pipeline` records a SUCCESS without results: comparing with it would call
    every failure NEW."""
    gating = book.start_pipeline(command=RUN, commit="c1", plan={"gating": True}, pr=3)
    book.finish_pipeline(gating, "SUCCESS")
    assert record_validation(book, "b1", gating, pr=3).ok
    assert book.base_pipeline("b1", None) is None
    main = book.start_pipeline(command=RUN, commit="m1", branch="main")
    book.finish_pipeline(main, "FAILURE")
    assert book.base_pipeline("b1", "main") == main


@pytest.mark.parametrize(
    ("state", "is_base"),
    [("SUCCESS", True), ("FAILURE", True), ("ABORTED", False), ("RUNNING", False)],
)
def test_only_a_finished_pipeline_is_a_base(book: Ledger, state: str, is_base: bool) -> None:
    number = book.start_pipeline(command=RUN, commit="b1")
    if state != "RUNNING":
        book.finish_pipeline(number, state)
    assert book.base_pipeline("b1", None) == (number if is_base else None)


@pytest.mark.parametrize(
    ("state", "plan", "why"),
    [
        ("FAILURE", {"gating": True}, "pipeline #1 ended FAILURE"),
        ("SUCCESS", {"gating": False}, "was a partial run (Partly Tested)"),
    ],
)
def test_only_a_successful_gating_run_validates(book: Ledger, state, plan, why) -> None:
    source = book.start_pipeline(command=RUN, commit="c1", plan=plan, pr=3)
    book.finish_pipeline(source, state)
    explicit = record_validation(book, "c2", source, pr=3)
    assert not explicit.ok and why in explicit.reason
    assert not record_validation(book, "c2", None, pr=3).ok  # and none is picked by default
    assert book.latest_number() == source  # a refused validation records nothing


def test_the_default_source_is_this_prs_latest_real_run(book: Ledger) -> None:
    mine = book.start_pipeline(command=RUN, commit="c1", plan={"gating": True}, pr=3)
    book.finish_pipeline(mine, "SUCCESS")
    other = book.start_pipeline(command=RUN, commit="x1", plan={"gating": True}, pr=4)
    book.finish_pipeline(other, "SUCCESS")
    first = record_validation(book, "c2", None, pr=3)
    assert first.ok and first.source == mine
    second = record_validation(book, "c3", None, pr=3)  # not the validation #first itself
    assert second.ok and second.source == mine


def test_retry_busy_retries_only_a_busy_ledger_and_only_while_patient() -> None:
    calls: list[str] = []

    def flaky(errors: list[Exception]):
        def call() -> str:
            calls.append("call")
            if errors:
                raise errors.pop(0)
            return "done"

        return call

    assert retry_busy(flaky([LedgerBusyError("locked")]), patience_s=60) == "done"
    assert len(calls) == 2
    calls.clear()
    with pytest.raises(LedgerBusyError):
        retry_busy(flaky([LedgerBusyError("locked")] * 2), patience_s=0)
    assert len(calls) == 1  # no patience left: the first busy answer is final
    calls.clear()
    with pytest.raises(ValueError):
        retry_busy(flaky([ValueError("not busy")]), patience_s=60)
    assert len(calls) == 1


def test_concurrent_processes_get_distinct_numbers(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    Ledger.open(path).close()
    code = (
        "import sys\nfrom stagebot.harness.ledger.book import Ledger\n"
        f"book = Ledger.open({str(path)!r})\n"
        "for i in range(25):\n"
        "    n = book.start_pipeline(command={'version': 1}, commit=sys.argv[1])\n"
        "    book.finish_pipeline(n, 'SUCCESS')\n"
    )
    workers = [subprocess.Popen([sys.executable, "-c", code, f"w{i}"]) for i in range(4)]
    assert [w.wait(timeout=120) for w in workers] == [0, 0, 0, 0]
    numbers = [
        row[0]
        for row in Ledger.open(path).connection.execute(
            "SELECT number FROM pipelines ORDER BY number"
        )
    ]
    assert numbers == list(range(1, 101))


def test_open_checks_once_and_durations_use_the_stage_index(tmp_path, monkeypatch) -> None:
    import sqlite3

    path = tmp_path / "ledger.sqlite"
    book = Ledger.open(path)
    number = book.start_pipeline(command=RUN, commit="c")
    book.record_result(number, shard("A_B-PyTorch-1", tests=[Outcome("t::a", "passed", 2.0)]))
    book.record_result(number, shard("A%B-PyTorch-1", tests=[Outcome("t::x", "passed", 5.0)]))
    book.close()
    statements: list[str] = []
    real_connect = sqlite3.connect

    def traced(*args, **kwargs):
        connection = real_connect(*args, **kwargs)
        connection.set_trace_callback(statements.append)
        return connection

    monkeypatch.setattr(sqlite3, "connect", traced)
    for readonly in (False, True):
        Ledger.open(path, readonly=readonly).close()
    # One quick_check per open (issue 12: a damaged file is refused before it is read; about
    # 0.2 s for a 130 MB ledger), never the slower integrity_check.
    scans = [s for s in statements if "quick_check" in s or "integrity_check" in s]
    assert scans == ["PRAGMA quick_check(3)"] * 2, scans
    book = Ledger.open(path, readonly=True)
    assert book.durations("A_B-PyTorch") == {"t::a": 2.0}  # '_' and '%' are not wildcards
    query = next(s for s in reversed(statements) if "FROM tests t" in s)
    plan = " ".join(
        str(row[-1]) for row in book.connection.execute("EXPLAIN QUERY PLAN " + query).fetchall()
    )
    assert "tests_by_stage" in plan, plan


def test_a_ledger_is_a_context_manager_that_closes_it(tmp_path) -> None:
    import sqlite3

    with Ledger.open(tmp_path / "ledger.sqlite") as book:
        book.start_pipeline(command=RUN, commit="c")
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        book.connection.execute("SELECT 1")
    assert not hasattr(Ledger, "record_results")  # record_result, one shard at a time


def main_pipeline(book: Ledger, commit: str, results: list[StageResult]) -> int:
    number = book.start_pipeline(command=RUN, commit=commit, branch="main")
    for result in results:
        book.record_result(number, result)
    book.finish_pipeline(number, "FAILURE")
    return number


def test_test_outcomes_are_keyed_by_stage_family(book: Ledger) -> None:
    number = main_pipeline(
        book,
        "m1",
        [
            shard("CPU-PyTorch-1", tests=[Outcome("t.py::x", "passed", 1.0)]),
            shard("DGX_H200-4_GPUs-PyTorch-2", tests=[Outcome("t.py::x", "failed", 2.0)]),
        ],
    )
    outcomes = book.test_outcomes(number)
    assert outcomes[("CPU-PyTorch", "t.py::x")].outcome == "passed"
    assert outcomes[("DGX_H200-4_GPUs-PyTorch", "t.py::x")].outcome == "failed"


def test_flaky_history_on_main_has_both_signs(book: Ledger) -> None:
    """Failed then passed on a re-run (outcome flaky); or failed and passed at the same commit."""
    again = "passed on re-run 1 after: TimeoutError: cache"
    rerun = shard("CPU-PyTorch-1", tests=[Outcome("t.py::a", "flaky", 1.0, again)])
    first = main_pipeline(book, "m1", [rerun])
    failed = shard("CPU-PyTorch-1", tests=[Outcome("t.py::b", "failed", 1.0, "AssertionError")])
    second = main_pipeline(book, "m2", [failed])
    passed = shard("CPU-PyTorch-1", tests=[Outcome("t.py::b", "passed", 1.0)])
    main_pipeline(book, "m2", [passed])
    steady = shard("CPU-PyTorch-1", tests=[Outcome("t.py::c", "failed", 1.0, "AssertionError")])
    main_pipeline(book, "m3", [steady])  # failed, never passed at m3: not flaky
    pr = book.start_pipeline(command=RUN, commit="p1", branch="feature")
    book.record_result(pr, shard("CPU-PyTorch-1", tests=[Outcome("t.py::d", "flaky", 1.0)]))
    book.finish_pipeline(pr, "SUCCESS")  # not main's history
    assert flaky_history(book, "main") == {
        ("CPU-PyTorch", "t.py::a"): (first,),
        ("CPU-PyTorch", "t.py::b"): (second,),
    }
    assert flaky_evidence(book, "main") == {  # how it failed there; t.py::c was never flaky
        ("CPU-PyTorch", "t.py::a"): ("TimeoutError: cache",),
        ("CPU-PyTorch", "t.py::b"): ("AssertionError",),
    }


def test_stages_for_a_test_shows_its_history_on_main(tmp_path: Path) -> None:
    from fixtures.botrun import CATALOG, bot

    test_id = "tests/fixtures/suites/check_flaky.py::test_flaky_once"
    with Ledger.open(tmp_path / "l.sqlite") as book:
        flaky = Outcome(test_id, "flaky", 1.0, "passed on re-run 1", 2)
        first = main_pipeline(book, "m1", [shard("CPU-PyTorch-Flaky-1", tests=[flaky])])
        passed = Outcome(test_id, "passed", 1.0)
        second = main_pipeline(book, "m2", [shard("CPU-PyTorch-Flaky-1", tests=[passed])])
    done = bot(
        "stages",
        "--catalog",
        str(CATALOG),
        "--test",
        test_id,
        "--ledger",
        str(tmp_path / "l.sqlite"),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "CPU-PyTorch-Flaky-1"
    assert f"  #{second} m2 CPU-PyTorch-Flaky-1 {test_id}: passed" in lines
    assert (
        f"  #{first} m1 CPU-PyTorch-Flaky-1 {test_id}: flaky (failed, then passed on attempt 2)"
        in lines
    )
    assert lines[-1] == f"flaky on main: {test_id} in CPU-PyTorch-Flaky: #{first}"
