"""GPU time in a report, checked against the ledger's own durations (read here with SQL, not
through the code under test), and main's running total that `bot stages --cost` prints."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from fixtures.botrun import CATALOG, bot

from stagebot.bot.comments.grammar import parse_comment
from stagebot.harness.ledger.book import Ledger
from stagebot.harness.pipeline.base import Base
from stagebot.harness.pipeline.lifecycle import finish, start
from stagebot.harness.report import render_report
from stagebot.harness.results import FAIL_FAST, StageResult
from stagebot.harness.results import TestOutcome as Outcome
from stagebot.stages.catalog import load_catalog
from stagebot.stages.planner import plan_run

ONE, FOUR = "H200-PyTorch-1", "H200-4_GPUs-PyTorch-1"


def shard(stage, state, seconds, tests=(), evidence=None, reused_from=None) -> StageResult:
    return StageResult(
        stage,
        1,
        1,
        state,
        "2026-01-01T00:00:00+00:00",
        "2026-01-01T00:05:00+00:00",
        seconds,
        "H200",
        [],
        list(tests),
        evidence=evidence,
        reused_from=reused_from,
    )


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """Two pipelines on main: #1 ran both stages; #2 reused the 1-GPU stage from #1 and
    fail-fast cancelled the 4-GPU stage after a minute."""
    path = tmp_path / "ledger.sqlite"
    catalog = load_catalog(CATALOG)
    command = parse_comment(f'/bot run --stage-list "{ONE}, {FOUR}"')
    with Ledger.open(path) as book:
        for commit in ("a", "b"):
            plan = plan_run(command, catalog, commit=commit)
            number = start(book, plan, branch="main")
            if commit == "a":
                tests = [Outcome("t::one", "passed", 30.0), Outcome("t::two", "passed", 90.0)]
                book.record_result(number, shard(ONE, "SUCCESS", 125.0, tests))
                book.record_result(number, shard(FOUR, "SUCCESS", 300.0))
            else:
                book.record_result(
                    number,
                    shard(ONE, "REUSED", 0.0, reused_from=1),
                    reused_tests=book.passed_tests(1, ONE),
                )
                why = f"{FAIL_FAST}: NEW failure in CPU-PyTorch-Toggle-1: t::toggle"
                book.record_result(number, shard(FOUR, "ABORTED", 60.0, evidence=why))
            finish(book, number, base=Base(), cancelled=False)
    return path


def ledger_figures(path: Path) -> dict[str, dict[str, float]]:
    """GPU-minutes of pipeline #2 from the ledger's rows: shard seconds x GPUs, the reused
    tests' recorded seconds, the cancelled shard's last full run less what it ran."""
    gpus = {ONE: 1, FOUR: 4}
    with sqlite3.connect(path) as db:
        ran = dict(
            db.execute(
                "SELECT s.stage, s.duration_s FROM shards s JOIN pipelines p ON p.id ="
                " s.pipeline_id WHERE p.number = 2 AND s.state != 'REUSED'"
            )
        )
        reused = dict(
            db.execute(
                "SELECT t.stage, SUM(t.duration_s) FROM tests t JOIN pipelines p ON p.id ="
                " t.pipeline_id WHERE p.number = 2 AND t.reused_from IS NOT NULL GROUP BY 1"
            )
        )
        (full,) = db.execute(
            "SELECT s.duration_s FROM shards s JOIN pipelines p ON p.id = s.pipeline_id"
            " WHERE p.number = 1 AND s.stage = ?",
            (FOUR,),
        ).fetchone()
    return {
        stage: {
            "run": count * ran.get(stage, 0.0) / 60,
            "reused": count * reused.get(stage, 0.0) / 60,
            "cancelled": count * (full - ran[stage]) / 60 if stage == FOUR else 0.0,
        }
        for stage, count in gpus.items()
    }


def test_the_reports_gpu_minutes_are_the_ledgers_durations(ledger) -> None:
    expected = ledger_figures(ledger)
    assert expected[ONE]["reused"] == 2.0 and expected[FOUR]["cancelled"] == 16.0  # the data
    with Ledger.open(ledger, readonly=True) as book:
        record = book.pipeline(2)
    from stagebot.harness.report import report_from_record

    report = report_from_record(record)
    figures = report.gpu_minutes()
    got = {
        row["stage"]: {k: row[k] for k in ("run", "reused", "cancelled")}
        for row in figures["stages"]
    }
    assert got == expected
    assert figures["total"] == {k: sum(e[k] for e in expected.values()) for k in expected[ONE]}
    text = render_report(report, "md")
    assert "#### GPU time (GPU-minutes)" in text
    assert "| total |  | 4.0 | 2.0 | 16.0 |" in text
    because = "because NEW failure in CPU-PyTorch-Toggle-1: t::toggle"
    assert f"**Cancelled by fail-fast (1):** {FOUR}, {because}" in text
    html = render_report(report, "html")
    assert '<table id="gpu-time">' in html and "<td>total</td><td></td><td>4.0</td>" in html
    json_report = render_report(report, "json")
    assert '"cancelled": 16.0' in json_report and f'"stages": [\n      "{FOUR}"' in json_report


def test_stages_cost_sums_mains_pipelines_per_day_and_gpu_type(ledger) -> None:
    with sqlite3.connect(ledger) as db:
        (day,) = {row[0][:10] for row in db.execute("SELECT started_at FROM pipelines")}
    done = bot("stages", "--cost", "--ledger", str(ledger), "--branch", "main")
    assert done.returncode == 0, done.stderr
    # #1: 1 x 125 s + 4 x 300 s = 22.1 min run; #2: 4 x 60 s run, 2.0 reused, 16.0 cancelled
    assert f"{day}  H200              26.1       2.0      16.0" in done.stdout
    assert (
        "none recorded" in bot("stages", "--cost", "--ledger", str(ledger), "--branch", "x").stdout
    )
    missing = bot("stages", "--cost", "--ledger", str(ledger.with_name("nope.sqlite")))
    assert missing.returncode == 2 and "no ledger at" in missing.stderr
