"""Attack tests (issue 13, findings 2 and 6): what a stage job, which runs the PR's code, can leave
in the results folder must not decide the pipeline's state. Real PyGithub against the fake
GitHub; the stage jobs really run (a failing suite), then the attacker's files are added."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import json

import pytest
from helpers.fake_pr import marker_of, replies, status
from helpers.workflow_jobs import Jobs, gh, jobs, ledger_state

from stagebot.harness.ledger.book import Ledger
from stagebot.harness.results import ResultError, StageResult

pytestmark = pytest.mark.slow


@pytest.fixture
def failing(gh, tmp_path, monkeypatch, capsys):
    return Jobs(gh, tmp_path, monkeypatch, capsys, suite="check_fail.py")


def forged_success(results, stage: str) -> dict:
    real = json.loads((results / stage / "result.json").read_text())
    return {**real, "state": "SUCCESS", "tests": [], "evidence": None}


def test_an_injected_result_folder_cannot_turn_a_failure_into_success(gh, failing) -> None:
    outputs = failing.handle_comment("/bot run", 101)
    results = failing.stage_jobs(outputs, 101)
    injected = results / "zzz-injected" / "result.json"
    injected.parent.mkdir()
    injected.write_text(json.dumps(forged_success(results, "CPU-PyTorch-1")))
    failing.publish(101, results)
    assert status(gh)["state"] == "failure"
    assert ledger_state(failing, 101) == "FAILURE"
    (reply,) = replies(gh)
    assert marker_of(reply).stages["CPU-PyTorch-1"] == "FAILURE"
    assert "Ignored result files (1)" in reply["body"]
    assert "zzz-injected/result.json (not the result.json of a planned shard)" in reply["body"]


def test_a_second_copy_deeper_down_is_ignored_and_named(gh, failing) -> None:
    outputs = failing.handle_comment("/bot run", 101)
    results = failing.stage_jobs(outputs, 101)
    copy = results / "CPU-PyTorch-1" / "again" / "result.json"
    copy.parent.mkdir()
    copy.write_text(json.dumps(forged_success(results, "CPU-PyTorch-1")))
    failing.publish(101, results)
    assert status(gh)["state"] == "failure"
    assert "CPU-PyTorch-1/again/result.json" in replies(gh)[0]["body"]


def test_a_result_claiming_another_shard_is_its_folders_error(gh, failing) -> None:
    outputs = failing.handle_comment("/bot run", 101)
    results = failing.stage_jobs(outputs, 101)
    # the build shard's job writes a SUCCESS for the failing test shard into its own folder
    claim = forged_success(results, "CPU-PyTorch-1")
    (results / "CPU-Build_Check" / "result.json").write_text(json.dumps(claim))
    failing.publish(101, results)
    with Ledger.open(failing.ledger, readonly=True) as book:
        states = {r.stage: (r.state, r.evidence) for r in book.pipeline(101).results}
    assert states["CPU-PyTorch-1"][0] == "FAILURE"
    state, evidence = states["CPU-Build_Check"]
    assert state == "ERROR" and "claims stage 'CPU-PyTorch-1'" in evidence, evidence
    assert status(gh)["state"] == "failure"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("stage", ["x"], id="stage is a list"),
        pytest.param("shard", "1", id="shard is a string"),
        pytest.param("shard", True, id="shard is a boolean"),
        pytest.param("gpus", [1], id="gpus holds a number"),
        pytest.param("duration_s", -1, id="negative duration"),
        pytest.param("reused_from", "#3", id="reused_from is a string"),
    ],
)
def test_a_malformed_result_is_a_recorded_error_not_a_crash(gh, jobs, field, value) -> None:
    outputs = jobs.handle_comment("/bot run", 101)
    results = jobs.stage_jobs(outputs, 101)
    path = results / "CPU-PyTorch-1" / "result.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))
    jobs.publish(101, results)  # exits 0: recorded, not a TypeError
    with Ledger.open(jobs.ledger, readonly=True) as book:
        states = {r.stage: (r.state, r.evidence) for r in book.pipeline(101).results}
    state, evidence = states["CPU-PyTorch-1"]
    assert state == "ERROR" and evidence.startswith("result.json unreadable: "), evidence
    assert field in evidence
    (reply,) = replies(gh)
    assert marker_of(reply).state != "RUNNING" and status(gh)["state"] != "pending"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"tests": [{"test_id": "t", "outcome": "pwned", "duration_s": 1}]}, "outcome 'pwned'"),
        ({"tests": [{"test_id": "t", "outcome": "passed", "duration_s": "1"}]}, "duration_s is"),
        ({"tests": ["t"]}, "tests[0] is a string"),
        ({"state": "PASSED"}, "state 'PASSED' is not one of"),
        ({"extra": 1}, "unknown field(s) ['extra']"),
        ({"shard": 3, "shards": 2}, "shard 3 is beyond shards 2"),
        ({"evidence": {"a": 1}}, "evidence is an object"),
    ],
)
def test_stage_result_from_json_checks_every_field(change, error) -> None:
    good = StageResult("S-1", 1, 1, "SUCCESS", None, None, 1.0, "CPU", []).to_json()
    StageResult.from_json(good)
    with pytest.raises(ResultError) as raised:
        StageResult.from_json({**good, **change})
    assert error in str(raised.value)


@pytest.mark.parametrize(
    "planted",
    [
        "CREATE VIEW newest AS SELECT * FROM pipelines",
        "CREATE TRIGGER t AFTER INSERT ON pipelines BEGIN SELECT 1; END",
    ],
)
def test_main_ledger_with_foreign_schema_is_refused_before_it_is_read(gh, jobs, planted) -> None:
    """Main's ledger is opened by SQLite in a privileged job before its digest is checked:
    the read-only open refuses what the bot never creates, so no commit is read from it and
    no status is asked for; the pipeline starts from an empty history."""
    import sqlite3

    jobs.post_merge(201)
    with sqlite3.connect(jobs.ledger) as raw:
        raw.execute(planted)
    raw.close()
    asked = len(gh.calls("list_statuses"))
    _, log = jobs.handle_push(202)
    assert "is not one the bot saved" in log, log
    assert len(gh.calls("list_statuses")) == asked  # nothing read from it reached GitHub
    assert len(list(jobs.tmp.glob("ledger.sqlite.rejected-*Z"))) == 1


def test_read_only_opens_do_not_trust_the_schema(tmp_path) -> None:
    path = tmp_path / "l.sqlite"
    Ledger.open(path).close()
    with Ledger.open(path, readonly=True) as book:
        assert book.connection.execute("PRAGMA trusted_schema").fetchone()[0] == 0
