"""`bot run` end to end on the fixture catalog: real pytest shards, a real SQLite ledger.

Each run is a fresh `bot` process from the repository root; the fixture stages take seconds.
"""

from __future__ import annotations

import getpass
import json
import sqlite3
import threading
from pathlib import Path

import jsonschema
import pytest
from fixtures.botrun import CATALOG, ROOT, bot, results, run_stages
from helpers.cli import bot_process

pytestmark = pytest.mark.slow

SHARD_FILES = {"result.json", "junit.xml", "tests.jsonl", "log.txt"}
SCHEMA = json.loads((ROOT / "harness" / "schemas" / "stage_result.v1.json").read_text())


def shard_tests(result: dict, outcome: str | None = None) -> list[str]:
    return [t["test_id"] for t in result["tests"] if outcome is None or t["outcome"] == outcome]


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.sqlite"


def test_run_splits_records_and_the_second_run_reuses_everything(tmp_path, ledger) -> None:
    first = run_stages(ledger, tmp_path / "out1", "CPU-PyTorch-1, CPU-PyTorch-2")
    assert first.returncode == 0, first.stdout + first.stderr
    user = getpass.getuser()  # a local run says who started it
    assert f"pipeline #1 [ run ] triggered by {user}. Commit: `c0ffee`" in first.stdout
    assert "completed with state SUCCESS (Partly Tested)" in first.stdout
    done = results(tmp_path / "out1")
    assert set(done) == {"CPU-PyTorch-1", "CPU-PyTorch-2"}
    for stage in done:
        assert SHARD_FILES <= {p.name for p in (tmp_path / "out1" / stage).iterdir()}
        jsonschema.validate(done[stage], SCHEMA)
        assert done[stage]["state"] == "SUCCESS"
    one, two = (set(shard_tests(done[s])) for s in ("CPU-PyTorch-1", "CPU-PyTorch-2"))
    assert one and two and not one & two and len(one | two) == 6  # a split, not a copy
    assert {"report.md", "report.html"} <= {p.name for p in (tmp_path / "out1").iterdir()}

    plan = bot(
        "dry-run",
        "--catalog",
        str(CATALOG),
        "--ledger",
        str(ledger),
        "--commit",
        "c0ffee",
        '/bot run --stage-list "CPU-PyTorch-1, CPU-PyTorch-2"',
    )
    assert plan.returncode == 0 and plan.stdout.count("passed in #1 on c0ffee") == 2

    second = run_stages(ledger, tmp_path / "out2", "CPU-PyTorch-1, CPU-PyTorch-2")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "pipeline #2 [ run ]" in second.stdout
    assert results(tmp_path / "out2") == {}  # no shard ran: nothing executed a test
    assert second.stdout.count("| REUSED |") == 2 and "3 reused" in second.stdout
    with sqlite3.connect(ledger) as db:
        states = db.execute(
            "SELECT p.number, s.stage, s.state FROM shards s JOIN pipelines p ON p.id ="
            " s.pipeline_id ORDER BY 1, 2"
        ).fetchall()
        pipelines = db.execute("SELECT number, state FROM pipelines ORDER BY 1").fetchall()
    assert states == [
        (1, "CPU-PyTorch-1", "SUCCESS"),
        (1, "CPU-PyTorch-2", "SUCCESS"),
        (2, "CPU-PyTorch-1", "REUSED"),
        (2, "CPU-PyTorch-2", "REUSED"),
    ]
    assert pipelines == [(1, "SUCCESS"), (2, "SUCCESS")]

    fresh = run_stages(ledger, tmp_path / "out3", "CPU-PyTorch-1", "--disable-reuse-test")
    assert (
        fresh.returncode == 0 and results(tmp_path / "out3")["CPU-PyTorch-1"]["state"] == "SUCCESS"
    )
    run_stages(ledger, tmp_path / "out4", "CPU-PyTorch-1", commit="beef")
    assert "CPU-PyTorch-1" in results(tmp_path / "out4")  # another commit reuses nothing


def test_mixed_run_categories_states_and_not_run(tmp_path, ledger) -> None:
    stages = "CPU-PyTorch-Fail-1, CPU-PyTorch-Flaky-1, CPU-PyTorch-Waived-1, H200-PyTorch-1, "
    stages += "H200-4_GPUs-PyTorch-1, CPU-PyTorch-Skipped-1, CPU-Build_Check"
    done = run_stages(
        ledger, tmp_path / "out", stages, "--disable-fail-fast", extra=["--cpu-slots", "2"]
    )
    assert done.returncode == 1, done.stdout + done.stderr
    states = {stage: r["state"] for stage, r in results(tmp_path / "out").items()}
    assert states == {
        "CPU-PyTorch-Fail-1": "FAILURE",
        "CPU-PyTorch-Flaky-1": "SUCCESS",
        "CPU-PyTorch-Waived-1": "SUCCESS",
        "H200-PyTorch-1": "NOT_RUN",
        "H200-4_GPUs-PyTorch-1": "NOT_RUN",
        "CPU-PyTorch-Skipped-1": "NOT_RUN",
        "CPU-Build_Check": "SUCCESS",
    }
    out = results(tmp_path / "out")
    assert "needs 4 x H200 GPU(s)" in out["H200-4_GPUs-PyTorch-1"]["evidence"]
    assert out["CPU-PyTorch-Skipped-1"]["evidence"].startswith("0 tests executed")
    flaky = {t["test_id"].split("::")[1]: t for t in out["CPU-PyTorch-Flaky-1"]["tests"]}
    assert flaky["test_flaky_once"]["outcome"] == "flaky"
    assert flaky["test_flaky_once"]["attempts"] == 2
    assert "ConnectionResetError" in flaky["test_flaky_once"]["evidence"]
    failed = {t["test_id"].split("::")[1]: t for t in out["CPU-PyTorch-Fail-1"]["tests"]}
    assert failed["test_wrong_sum"]["attempts"] == 3  # re-run twice, still failing
    assert failed["test_wrong_sum"]["evidence"].startswith("AssertionError: sum of [1, 2, 3]")
    assert (
        "1/4 elements mismatched, max abs diff 0.5" in failed["test_numeric_mismatch"]["evidence"]
    )
    waived = {t["test_id"].split("::")[1]: t for t in out["CPU-PyTorch-Waived-1"]["tests"]}
    assert waived["test_known_broken"] == {
        **waived["test_known_broken"],
        "outcome": "waived",
        "evidence": "https://example.invalid/bug/42 known broken",
    }
    report = (tmp_path / "out" / "report.md").read_text()
    assert "UNCLASSIFIED</b> (2)" in report and "FLAKY</b> (1)" in report
    assert "WAIVED</b> (1)" in report and "#### Not run (3)" in report
    assert "H200-PyTorch-1: needs 1 x H200 GPU(s)" in report
    assert "completed with state FAILURE (Partly Tested)" in done.stdout


def test_a_run_in_which_nothing_ran_is_not_a_success(tmp_path, ledger) -> None:
    done = run_stages(ledger, tmp_path / "out", "CPU-PyTorch-Skipped-1, H200-PyTorch-1")
    assert done.returncode == 4, done.stdout + done.stderr
    assert "completed with state NOT_RUN" in done.stdout and "Everything" not in done.stdout
    assert "#### Not run (2)" in done.stdout and "### ⚠️ Nothing ran" in done.stdout
    assert {r["state"] for r in results(tmp_path / "out").values()} == {"NOT_RUN"}


def test_fail_fast_aborts_the_running_shard(tmp_path, ledger) -> None:
    done = run_stages(
        ledger,
        tmp_path / "out",
        "CPU-PyTorch-Fail-1, CPU-PyTorch-Slow-1",
        extra=["--cpu-slots", "2"],
    )
    assert done.returncode == 1
    out = results(tmp_path / "out")
    assert out["CPU-PyTorch-Fail-1"]["state"] == "FAILURE"
    assert out["CPU-PyTorch-Slow-1"]["state"] == "ABORTED"
    # terminated, not waited for: the 10-minute test never finished (and no timeout stopped it)
    assert shard_tests(out["CPU-PyTorch-Slow-1"], "passed") == []
    assert "fail-fast" in out["CPU-PyTorch-Slow-1"]["evidence"]


def test_fail_fast_aborts_queued_shards_and_disable_runs_them(tmp_path, ledger) -> None:
    # One CPU slot, no recorded durations: equal expectations, so the order is by name and
    # Fail-1 runs first; its failure cancels the queued Waived-1.
    done = run_stages(ledger, tmp_path / "a", "CPU-PyTorch-Fail-1, CPU-PyTorch-Waived-1")
    states = {s: r["state"] for s, r in results(tmp_path / "a").items()}
    assert done.returncode == 1
    assert states == {"CPU-PyTorch-Fail-1": "FAILURE", "CPU-PyTorch-Waived-1": "ABORTED"}
    both = run_stages(
        ledger,
        tmp_path / "b",
        "CPU-PyTorch-Fail-1, CPU-PyTorch-Waived-1",
        "--disable-fail-fast",
        commit="other",
    )
    states = {s: r["state"] for s, r in results(tmp_path / "b").items()}
    assert states == {"CPU-PyTorch-Fail-1": "FAILURE", "CPU-PyTorch-Waived-1": "SUCCESS"}
    assert both.returncode == 1


def test_an_infra_error_shard_does_not_trigger_fail_fast(tmp_path, ledger) -> None:
    # One CPU slot: Crash-1 runs first (by name) and ends ERROR, a crash: INFRA, not NEW, so
    # the queued Waived-1 still runs (fail-fast cancels only for a NEW failure).
    done = run_stages(ledger, tmp_path / "out", "CPU-PyTorch-Crash-1, CPU-PyTorch-Waived-1")
    out = results(tmp_path / "out")
    assert out["CPU-PyTorch-Crash-1"]["state"] == "ERROR"
    assert out["CPU-PyTorch-Waived-1"]["state"] == "SUCCESS", done.stdout
    assert "fail-fast" not in done.stdout and done.returncode == 3


def test_per_test_reuse_reruns_only_what_failed(tmp_path, ledger) -> None:
    first = run_stages(ledger, tmp_path / "out1", "CPU-PyTorch-Fail-1")
    assert first.returncode == 1
    second = run_stages(ledger, tmp_path / "out2", "CPU-PyTorch-Fail-1")
    assert (
        "re-run, reusing its 1 passed test(s)"
        in bot(
            "dry-run",
            "--catalog",
            str(CATALOG),
            "--ledger",
            str(ledger),
            "--commit",
            "c0ffee",
            '/bot run --stage-list "CPU-PyTorch-Fail-1"',
        ).stdout
    )
    ran = results(tmp_path / "out2")["CPU-PyTorch-Fail-1"]
    assert sorted(t.split("::")[1] for t in shard_tests(ran)) == [
        "test_numeric_mismatch",
        "test_wrong_sum",
    ]
    assert ran["reused_from"] == 1 and second.returncode == 1


def test_base_comparison_new_pre_existing_and_suspects(tmp_path, ledger) -> None:
    base = run_stages(
        ledger,
        tmp_path / "base",
        "CPU-PyTorch-Toggle-1, CPU-PyTorch-Fail-1",
        "--disable-fail-fast",
        extra=["--branch", "main"],
        commit="base0",
    )
    assert base.returncode == 1  # Fail-1 fails on main too
    changed = tmp_path / "changed.txt"
    changed.write_text("src/toggle/core.py\nREADME.md\n")
    pr = run_stages(
        ledger,
        tmp_path / "pr",
        "CPU-PyTorch-Toggle-1, CPU-PyTorch-Fail-1",
        "--disable-fail-fast",
        commit="head1",
        extra=["--base-commit", "base0", "--pr", "7", "--changed-files", str(changed)],
        env={"STAGEBOT_FIXTURE_BROKEN": "1"},
    )
    assert pr.returncode == 1
    # as GitHub shows it: "#1" in escaped text carries a zero-width space (no link to issue 1)
    report = (tmp_path / "pr" / "report.md").read_text().replace("\u200b", "")
    assert report.startswith("### ❌ 1 new failure(s)")
    assert "#### NEW failures (1) — fail here, not this way on base #1" in report
    new_section = report.split("#### NEW failures")[1].split("<details>")[0]
    assert "check_toggle.py::test_toggle" in new_section
    assert "<code>src/toggle/core.py</code>" in new_section and "README" not in new_section
    assert "PRE-EXISTING</b> (2)" in report and "also failing on base #1" in report
    as_json = json.loads(
        bot("report", "--ledger", str(ledger), "--pipeline", "2", "--format", "json").stdout
    )
    categories = sorted(f["category"] for f in as_json["failures"])
    assert categories == ["NEW", "PRE-EXISTING", "PRE-EXISTING"]
    assert as_json["base_pipeline"] == 1 and as_json["exit_code"] == 1


def test_base_from_a_second_read_only_ledger(tmp_path) -> None:
    main_ledger, pr_ledger = tmp_path / "main.sqlite", tmp_path / "pr.sqlite"
    run_stages(
        main_ledger, tmp_path / "m", "CPU-PyTorch-Toggle-1", extra=["--branch", "main"], commit="m1"
    )
    before = main_ledger.read_bytes()
    pr = run_stages(
        pr_ledger,
        tmp_path / "p",
        "CPU-PyTorch-Toggle-1",
        commit="p1",
        extra=["--base-ledger", str(main_ledger)],
        env={"STAGEBOT_FIXTURE_BROKEN": "1"},
    )
    assert pr.returncode == 1 and "NEW failures (1)" in pr.stdout
    assert main_ledger.read_bytes() == before


def test_two_runs_on_one_ledger_at_once_both_complete(tmp_path, ledger) -> None:
    outcomes = {}

    def go(name: str) -> None:
        outcomes[name] = run_stages(
            ledger, tmp_path / name, "CPU-PyTorch-Waived-1", commit=f"commit-{name}"
        )

    threads = [threading.Thread(target=go, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [outcomes[n].returncode for n in "ab"] == [0, 0], [o.stderr for o in outcomes.values()]
    with sqlite3.connect(ledger) as db:
        rows = db.execute("SELECT number, commit_id, state FROM pipelines ORDER BY 1").fetchall()
    assert sorted(r[0] for r in rows) == [1, 2]
    assert {r[1] for r in rows} == {"commit-a", "commit-b"} and {r[2] for r in rows} == {"SUCCESS"}


def test_run_stage_from_a_matrix_entry(tmp_path) -> None:
    plan = json.loads(
        bot(
            "dry-run",
            "--json",
            "--catalog",
            str(CATALOG),
            '/bot run --stage-list "CPU-PyTorch-2, H200-PyTorch-1"',
        ).stdout
    )
    from stagebot.stages.catalog import load_catalog
    from stagebot.stages.matrix import matrix_entries
    from stagebot.stages.plan import Plan

    entries = {e.stage: e for e in matrix_entries(Plan.from_json(plan), load_catalog(CATALOG), 9)}
    entry_file = tmp_path / "entry.json"
    entry_file.write_text(json.dumps(entries["CPU-PyTorch-2"].to_json()))
    done = bot("run-stage", "--entry", str(entry_file), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    result = results(tmp_path / "out")["CPU-PyTorch-2"]
    assert result["state"] == "SUCCESS" and len(result["tests"]) == 3  # its half of the family
    gpu = bot(
        "run-stage",
        "--entry",
        json.dumps(entries["H200-PyTorch-1"].to_json()),
        "--out",
        str(tmp_path / "out"),
    )
    assert gpu.returncode == 0 and "NOT_RUN" in gpu.stdout
    bad = bot("run-stage", "--entry", "{not json")
    assert bad.returncode == 2 and "neither a JSON file nor JSON text" in bad.stderr

    assembled = bot("report", "--results", str(tmp_path / "out"), "--format", "json")
    data = json.loads(assembled.stdout)
    assert [s["stage"] for s in data["stages"]] == ["CPU-PyTorch-2", "H200-PyTorch-1"]
    assert data["not_run"][0]["stage"] == "H200-PyTorch-1"


def test_report_usage_errors(tmp_path) -> None:
    both = bot("report", "--ledger", str(tmp_path / "l.sqlite"), "--results", str(tmp_path))
    assert both.returncode == 2 and "not both" in both.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = bot("report", "--results", str(empty))
    assert missing.returncode == 2 and "no result.json" in missing.stderr


def test_commands_that_run_nothing(tmp_path, ledger) -> None:
    done = bot("run", "--ledger", str(ledger), "LGTM")
    assert done.returncode == 0 and "nothing to run" in done.stdout
    bad = bot(
        "run", "--catalog", str(CATALOG), "--ledger", str(ledger), '/bot run --stage-list "Nope-1"'
    )
    assert bad.returncode == 2 and "unknown stage 'Nope-1'" in bad.stderr


def test_naming_a_pipeline_that_does_not_exist_is_an_error(tmp_path, ledger) -> None:
    first = run_stages(ledger, tmp_path / "o", "CPU-Build_Check")
    assert first.returncode == 0, first.stderr
    for comment in (
        "/bot reuse-pipeline 7",
        '/bot run --stage-list "CPU-Build_Check" --reuse-test 7',
    ):
        done = bot(
            "run", "--catalog", str(CATALOG), "--ledger", str(ledger), "--commit", "c0ffee", comment
        )
        assert done.returncode == 2, done.stdout + done.stderr
        assert (
            done.stderr.startswith("Error: pipeline #7 is not in the ledger")
            and "(it has #1)" in done.stderr
        )
        assert len(done.stderr.strip().splitlines()) == 1


def test_reuse_pipeline_validates_only_successful_gating_runs(tmp_path, ledger) -> None:
    partial = run_stages(ledger, tmp_path / "o", "CPU-PyTorch-Waived-1")
    assert partial.returncode == 0
    refused = bot("run", "--ledger", str(ledger), "--commit", "next", "/bot reuse-pipeline 1")
    assert refused.returncode == 1 and "partial run (Partly Tested)" in refused.stdout
    from stagebot.harness.ledger.book import Ledger

    book = Ledger.open(ledger)
    gating = book.start_pipeline(
        command={"version": 1, "command": "run", "options": {}},
        commit=_head(),
        plan={"gating": True},
    )
    book.finish_pipeline(gating, "SUCCESS")
    ok = bot("run", "--ledger", str(ledger), "--commit", _head(), f"/bot reuse-pipeline {gating}")
    assert ok.returncode == 0 and f"reuses pipeline #{gating}" in ok.stdout
    moved = bot("run", "--ledger", str(ledger), "--commit", _head() + "~0", "/bot reuse-pipeline")
    assert moved.returncode == 0 and "files changed between them" in moved.stdout


def _head() -> str:
    import subprocess

    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_relative_out_is_taken_from_where_bot_runs_not_from_root(tmp_path: Path) -> None:
    """`bot run --root R --out rel` from another folder: the shard folders (and a build stage's
    $STAGEBOT_WORK) land under ./rel, not under R/rel."""

    from fixtures.botrun import CATALOG, ROOT

    args = [
        "run",
        "--catalog",
        str(CATALOG),
        "--ledger",
        str(tmp_path / "l.sqlite"),
        "--root",
        str(ROOT),
        "--out",
        "rel",
        "--commit",
        "c0ffee",
        '/bot run --stage-list "CPU-Build_Check"',
    ]
    done = bot_process(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "rel" / "CPU-Build_Check" / "result.json").is_file()
    assert not (ROOT / "rel").exists()


def test_a_family_can_turn_reruns_off(tmp_path, ledger) -> None:
    """CPU-PyTorch-Once runs CPU-PyTorch-Fail's suite with max_reruns: 0 in the catalog."""
    done = run_stages(ledger, tmp_path / "out", "CPU-PyTorch-Once-1")
    assert done.returncode == 1, done.stdout + done.stderr
    out = results(tmp_path / "out")["CPU-PyTorch-Once-1"]
    failed = {t["test_id"].split("::")[1]: t for t in out["tests"]}
    assert out["state"] == "FAILURE" and failed["test_wrong_sum"]["attempts"] == 1
    assert not list((tmp_path / "out").rglob("rerun-*.jsonl"))


def test_shard_timeout_replaces_the_catalogs_higher_or_lower() -> None:
    """`--shard-timeout` is this machine's limit: a loaded machine may need more time than the
    catalog gives, a quick check less."""
    from stagebot.bot.comments.grammar import parse_comment
    from stagebot.harness.run.shard import shard_timeout_s
    from stagebot.stages.catalog import load_catalog
    from stagebot.stages.matrix import matrix_entries
    from stagebot.stages.planner import plan_run

    catalog = load_catalog(CATALOG)
    plan = plan_run(parse_comment('/bot run --stage-list "CPU-PyTorch-1"'), catalog, commit="c0")
    (entry,) = matrix_entries(plan, catalog, 1)
    assert shard_timeout_s(entry) == 300.0  # the catalog's 5 minutes
    assert shard_timeout_s(entry, 7200.0) == 7200.0
    assert shard_timeout_s(entry, 2.0) == 2.0
