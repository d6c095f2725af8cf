"""The live progress line: incremental outcome counts of a stream still being written."""

from __future__ import annotations

import io
import json
from pathlib import Path

from stagebot.harness.results import StageResult
from stagebot.harness.results import TestOutcome as Outcome
from stagebot.harness.run.progress import Expected, Progress
from stagebot.harness.run.streams import LiveCounts


def _record(test_id: str, outcome: str | None = None) -> bytes:
    event = (
        {"event": "result", "test_id": test_id, "outcome": outcome}
        if outcome
        else {
            "event": "start",
            "test_id": test_id,
        }
    )
    return (json.dumps(event) + "\n").encode()


def test_counts_read_only_appended_whole_lines(tmp_path: Path):
    path = tmp_path / "tests.jsonl"
    live = LiveCounts(path)
    assert live.counts() == {}, "no file yet"
    path.write_bytes(_record("a") + _record("a", "passed") + _record("b", "failed"))
    assert live.counts() == {"passed": 1, "failed": 1}
    offset = live.offset
    half = _record("c", "passed")
    with path.open("ab") as stream:
        stream.write(half[:10])
    assert live.counts() == {"passed": 1, "failed": 1} and live.offset == offset
    with path.open("ab") as stream:
        stream.write(half[10:] + b"not json\n" + _record("b", "passed"))
    assert live.counts() == {"passed": 3}, "b's rerun replaces its failure; bad lines are skipped"
    assert live.offset == path.stat().st_size
    path.write_bytes(_record("z", "skipped"))  # a new run of the shard replaced the file
    assert live.counts() == {"skipped": 1}


def test_the_live_line_shows_each_running_shard(tmp_path: Path):
    path = tmp_path / "tests.jsonl"
    path.write_bytes(_record("a", "passed") + _record("b", "error"))
    out = io.StringIO()
    progress = Progress(out, live=True)
    progress.started("CPU-PyTorch-1", (), path)
    progress.tick()
    assert "CPU-PyTorch-1" in out.getvalue() and "1✓ 1✗" in out.getvalue()
    quiet = io.StringIO()
    plain = Progress(quiet, live=False)
    plain.started("CPU-PyTorch-1", (), path)
    plain.tick()
    assert quiet.getvalue().count("\n") == 1, "plain output has no live line"


def _result(stage: str, tests: int) -> StageResult:
    return StageResult(
        stage=stage,
        shard=1,
        shards=1,
        state="SUCCESS",
        started_at=None,
        finished_at=None,
        duration_s=1.0,
        gpu_type="CPU",
        gpus=[],
        tests=[Outcome(f"t::{i}", "passed", 0.1) for i in range(tests)],
    )


def test_the_progress_shows_tests_done_of_the_total_and_the_time_left(tmp_path: Path):
    out, now = io.StringIO(), [0.0]
    progress = Progress(out, live=False, clock=lambda: now[0])
    progress.plan(
        {"A-1": Expected(4, 100.0), "A-2": Expected(6, 60.0), "B-1": Expected(None, 20.0)},
        parallel=2,
    )
    # 180 s on 2 slots
    assert progress.overall() == "0/3 shards, 0/10+ tests, 0s elapsed, ~1m30s left"
    stream = tmp_path / "tests.jsonl"
    stream.write_bytes(_record("t::1", "passed") + _record("t::2", "failed"))
    progress.started("A-2", ("cpu:0",), stream)
    now[0] = 20.0
    assert progress.overall().startswith("0/3 shards, 2/10+ tests, 20s elapsed, ~1m20s left")
    progress.finished(_result("A-1", 4))
    assert "[1/3 shards, 6/10+ tests, 20s elapsed, ~" in out.getvalue().splitlines()[-1]
    progress.finished(_result("A-2", 6))
    progress.finished(_result("B-1", 3))
    assert progress.overall() == "3/3 shards, 13/13 tests, 20s elapsed"


def test_without_a_terminal_a_line_comes_every_30_seconds(tmp_path: Path):
    """CI logs and redirected files: a long shard is never silent (the clock is the test's)."""
    out, now = io.StringIO(), [0.0]
    progress = Progress(out, live=False, clock=lambda: now[0])
    progress.plan({"A-1": Expected(10, 300.0)}, parallel=1)
    stream = tmp_path / "tests.jsonl"
    stream.write_bytes(_record("t::1", "passed") + _record("t::2", "failed"))
    progress.started("A-1", ("cpu:0",), stream)
    lines = len(out.getvalue().splitlines())
    now[0] = 29.0
    progress.tick()
    assert len(out.getvalue().splitlines()) == lines  # not yet
    now[0] = 30.0
    progress.tick()
    progress.tick()  # once per 30 s, however often the executor ticks
    last = out.getvalue().splitlines()
    assert len(last) == lines + 1
    assert last[-1] == (
        "[stagebot] running A-1 30s 1✓ 1✗ [0/1 shards, 2/10 tests, 30s elapsed, ~4m30s left]"
    )
    now[0] = 60.0
    progress.tick()
    assert len(out.getvalue().splitlines()) == lines + 2


def test_the_estimate_says_when_there_is_no_history_and_when_it_is_past(tmp_path: Path):
    now = [0.0]
    progress = Progress(io.StringIO(), live=False, clock=lambda: now[0])
    progress.plan({"A-1": Expected(None, None)}, parallel=1)
    assert progress.overall() == "0/1 shards, 0/? tests, 0s elapsed, no history yet"
    stream = tmp_path / "first.jsonl"
    stream.write_bytes(_record("t::1", "passed") + _record("t::2", "skipped"))
    progress.started("A-1", ("cpu:0",), stream)
    assert progress.overall().startswith("0/1 shards, 2/? tests")  # not "2/2+": no total known
    progress.plan({"A-1": Expected(3, 60.0), "B-1": Expected(None, None)}, parallel=1)
    assert progress.overall().endswith("~1m00s left + 1 shard(s) with no history")
    progress.plan({"A-1": Expected(3, 60.0)}, parallel=1)
    progress.started("A-1", ("cpu:0",), tmp_path / "tests.jsonl")
    now[0] = 1800.0  # half an hour into a shard that took a minute last time
    assert progress.overall() == "0/1 shards, 0/3 tests, 30m00s elapsed, past the ledger's estimate"


def test_the_estimate_counts_only_shards_that_ran_to_the_end(tmp_path: Path):
    """An aborted shard ran a few of its tests: its durations would promise a short run."""
    from stagebot.harness.ledger.book import Ledger

    def shard(state: str, tests: int) -> StageResult:
        result = _result("A-1", tests)
        return StageResult(**{**result.__dict__, "state": state})

    with Ledger.open(tmp_path / "l.sqlite") as book:
        aborted = book.start_pipeline(command={"name": "run"}, commit="c1")
        book.record_result(aborted, shard("ABORTED", 2))
        book.finish_pipeline(aborted, "ABORTED")
        assert book.durations("A") == {}
        complete = book.start_pipeline(command={"name": "run"}, commit="c2")
        book.record_result(complete, shard("SUCCESS", 5))
        book.finish_pipeline(complete, "SUCCESS")
        assert sorted(book.durations("A")) == [f"t::{i}" for i in range(5)]


def test_shards_that_cannot_run_here_are_not_collected(tmp_path: Path, monkeypatch):
    """--cpu-slots 0: the split family's tests are never collected (a pytest per family)."""
    from fixtures.botrun import CATALOG

    from stagebot.bot.comments.grammar import parse_comment
    from stagebot.harness.run import executor, placement
    from stagebot.stages.catalog import load_catalog
    from stagebot.stages.planner import plan_run

    def collect(*args, **kwargs):
        raise AssertionError("collected the tests of a shard that cannot run here")

    monkeypatch.setattr(placement, "collect_tests", collect)
    catalog = load_catalog(CATALOG)
    command = parse_comment('/bot run --stage-list "CPU-PyTorch-1, CPU-PyTorch-2"')
    plan = plan_run(command, catalog, changed_files=None, commit="c0ffee")
    settings = executor.Settings(out_dir=tmp_path, root=tmp_path, cpu_slots=0, devices=[])
    done = executor.execute(plan, catalog, 1, settings, progress=Progress(io.StringIO()))
    assert {r.state for r in done.results} == {"NOT_RUN"}
    assert all("--cpu-slots 0" in r.evidence for r in done.results)
