"""The first signal on GitHub, as the three workflows run it on the fake GitHub (real PyGithub):
one stage run per stage, a report run for each as it ends, the reply edited into a partial
report, fail-fast cancelling the stage runs a NEW failure condemned, and what the reply says of
GPU time."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.fake_pr import SHA, marker_of, replies, status
from helpers.workflow_jobs import Jobs, gh, jobs

pytestmark = pytest.mark.slow

TOGGLE = "tests/fixtures/suites/check_toggle.py::test_toggle"
FIRST, SLOW = "CPU-PyTorch-1", "CPU-Build_Check"


def test_the_reply_counts_gpu_time(gh, jobs) -> None:
    jobs.whole("/bot run", 101)
    (reply,) = replies(gh)
    assert "completed with state SUCCESS" in reply["body"]
    assert "GPU time: none (no GPU stage in this pipeline)." in reply["body"]


@pytest.fixture
def toggled(gh, tmp_path, monkeypatch, capsys) -> Jobs:
    """The jobs of a repository whose CPU-PyTorch stage runs the toggle suite: main's pipeline
    (the base) has passed it; the PR's stage jobs break it (a NEW failure)."""
    jobs = Jobs(gh, tmp_path, monkeypatch, capsys, suite="check_toggle.py")
    main = jobs.push(1)
    jobs.report(jobs.stages(main), 1)
    monkeypatch.setenv("STAGEBOT_FIXTURE_BROKEN", "1")
    gh.cancel_at_once = False  # a cancelled run stops when the test says, as runners do
    return jobs


def _reply(gh, number: int) -> dict:
    return next(c for c in replies(gh) if marker_of(c).pipeline == number)


def _first_stage_fails(jobs: Jobs, body: str) -> tuple[dict, str]:
    """Pipeline #101 of ``body``: its first stage ends with a NEW failure and is reported while
    the second stage's run still runs; (the plan job's outputs, the report's log)."""
    outputs = jobs.plan(body, 101)
    assert list(outputs["stage_runs"]) == [FIRST, SLOW]
    assert len(set(outputs["stage_runs"].values())) == 2  # one stage run per stage
    _, log = jobs.report(jobs.stage(outputs, FIRST), 101)
    return outputs, log


def test_a_new_failure_is_in_the_reply_and_status_before_the_slow_stage_ends_and_cancels_it(
    gh, toggled
) -> None:
    outputs, log = _first_stage_fails(toggled, "/bot run")
    slow_run = outputs["stage_runs"][SLOW]
    assert gh.runs[slow_run]["status"] != "completed"  # the slow stage has not ended
    partial = _reply(gh, 101)["body"]
    assert "running: 1 of 2 stage(s) done" in partial
    assert f"**NEW failure in {FIRST}** (so far): {TOGGLE}" in partial
    assert "Still running" not in partial  # the slow stage is being cancelled
    assert (
        f"status stays pending until the last stage ends; meanwhile it says NEW failure in {FIRST}"
        in partial
    )
    assert "toggle broken by this change" in partial  # the failure's key line, in the report
    assert f"**Cancelled by fail-fast (1):** {SLOW}, because NEW failure in {FIRST}" in partial
    assert marker_of(_reply(gh, 101)).stages == {FIRST: "FAILURE", SLOW: "PENDING"}
    pending = status(gh)
    assert pending["state"] == "pending"
    said = f"PR_Github #101 is running on {SHA[:7]}: NEW failure in {FIRST}"
    assert pending["description"] == said
    assert gh.cancel_requested == [slow_run]  # the report job cancelled it
    assert f"fail-fast: cancelled {SLOW} (run {slow_run})" in log

    gh.runs[slow_run].update(status="completed", conclusion="cancelled")  # its runner stops
    toggled.report(slow_run, 101)
    final = _reply(gh, 101)["body"]
    assert "completed with state FAILURE" in final
    why = f"NEW failure in {FIRST}: {TOGGLE}"
    assert f"**Cancelled by fail-fast (1):** {SLOW}, because {why}" in final
    assert status(gh)["state"] == "failure"
    stages = marker_of(_reply(gh, 101)).stages
    assert stages == {FIRST: "FAILURE", SLOW: "ABORTED"}  # never "passed" for reuse

    # the next /bot run runs the cancelled stage again (and the failed one)
    again = toggled.plan("/bot run", 102)
    assert list(again["stage_runs"]) == [FIRST, SLOW]


def test_a_cancelled_run_whose_artifact_claims_success_is_aborted(gh, toggled) -> None:
    """The slow stage's job ran to its end before the cancel landed and uploaded a SUCCESS: the
    run GitHub concluded cancelled is ABORTED with fail-fast's reason, never a pass."""
    outputs, _ = _first_stage_fails(toggled, "/bot run")
    toggled.report(toggled.stage(outputs, SLOW, conclusion="cancelled"), 101)
    final = _reply(gh, 101)["body"]
    assert marker_of(_reply(gh, 101)).stages == {FIRST: "FAILURE", SLOW: "ABORTED"}
    assert f"**Cancelled by fail-fast (1):** {SLOW}, because NEW failure in {FIRST}" in final


def test_disable_fail_fast_runs_the_slow_stage_to_its_end(gh, toggled) -> None:
    outputs, _ = _first_stage_fails(toggled, "/bot run --disable-fail-fast")
    assert gh.cancel_requested == []
    partial = _reply(gh, 101)["body"]
    assert f"**NEW failure in {FIRST}** (so far)" in partial
    assert f"**Still running (1):** {SLOW}. Expected to end within about " in partial
    assert f"({SLOW}'s last full run in the ledger took " in partial  # main's, here
    assert ", its run started " in partial  # the estimate counts what is left of it
    assert "Cancelled by fail-fast" not in partial
    assert status(gh)["description"].endswith(f": NEW failure in {FIRST}")

    toggled.report(toggled.stage(outputs, SLOW), 101)
    final = _reply(gh, 101)["body"]
    assert "completed with state FAILURE" in final and "Cancelled by fail-fast" not in final
    assert marker_of(_reply(gh, 101)).stages == {FIRST: "FAILURE", SLOW: "SUCCESS"}


def test_a_superseded_pipelines_late_partial_report_never_replaces_the_newer_reply(
    gh, toggled
) -> None:
    old = toggled.plan("/bot run --disable-fail-fast", 101)
    new = toggled.plan("/bot run --disable-fail-fast", 102)  # supersedes #101: cancels its runs
    assert set(old["stage_runs"].values()) <= set(gh.cancel_requested)
    toggled.report(toggled.stage(new, FIRST), 102)
    newer = _reply(gh, 102)["body"]
    newer_status = status(gh)
    # #101's first stage job had finished before its run was cancelled; its report comes last
    toggled.stage(old, FIRST)
    _, log = toggled.report(old["stage_runs"][FIRST], 101)
    assert "partial report of pipeline #101 not written: its reply says ABORTED" in log
    assert _reply(gh, 102)["body"] == newer
    assert status(gh) == newer_status
    assert marker_of(_reply(gh, 101)).state == "ABORTED"


def test_a_report_that_wrote_less_than_it_could_repairs_the_reply(gh, toggled) -> None:
    """GitHub has no conditional edit: the second stage ends, and its report could land, right
    after the first stage's report read the reply; the first report looks at the stage runs
    again after writing and publishes what it now knows (here: the final report)."""
    outputs = toggled.plan("/bot run --disable-fail-fast", 101)
    toggled.stage(outputs, FIRST)
    slow_run = outputs["stage_runs"][SLOW]
    (dispatch,) = [d for d in gh.dispatches if d["run_id"] == slow_run]
    (entry,) = json.loads(dispatch["inputs"]["matrix"])
    toggled.run_stage(entry, toggled.tmp / "slow")

    def slow_stage_ends() -> None:
        toggled.upload_results(slow_run, SLOW, toggled.tmp / "slow")
        gh.runs[slow_run].update(status="completed", conclusion="success")

    gh.after("list_comments", slow_stage_ends)  # while the first report reads the reply
    outputs, log = toggled.report(outputs["stage_runs"][FIRST], 101)
    assert "into the partial report: 1 of 2 stage(s) done" in log
    assert outputs["published"] == "true"  # it went on to the final report, and its ledger
    assert marker_of(_reply(gh, 101)).stages == {FIRST: "FAILURE", SLOW: "SUCCESS"}
    assert "completed with state FAILURE" in _reply(gh, 101)["body"]


GPU_CATALOG = """
gpu_types:
  H200: {device_names: ['NVIDIA H200*'], runner_labels: [gpu-h200]}
families:
  - {name: H200-8_GPUs-PyTorch, kind: test, timeout_minutes: 2, run_if_changed: ['src/*'],
     suites: [{path: tests/fixtures/suites/check_toggle.py}]}
  - {name: H200-8_GPUs-PyTorch-Steady, kind: test, timeout_minutes: 2,
     run_if_changed: ['src/*'], suites: [{path: tests/fixtures/suites/check_basic.py}]}
"""
EIGHT, STEADY = "H200-8_GPUs-PyTorch-1", "H200-8_GPUs-PyTorch-Steady-1"


def _shard_seconds(gh, artifact_name: str, pipeline: int, stage: str) -> float:
    """A shard's recorded duration, read with SQL from the ledger a report run uploaded (the
    newest artifact of that name), not through the code under test."""
    return _shard_column(gh, artifact_name, pipeline, stage, "duration_s")


def _shard_column(gh, artifact_name: str, pipeline: int, stage: str, column: str):
    """A shard's ``column`` in the newest ledger artifact ``artifact_name``, read with SQL."""
    import io
    import sqlite3
    import tempfile
    import zipfile

    artifact = max(
        (a for a in gh.artifacts.values() if a["name"] == artifact_name), key=lambda a: a["id"]
    )
    data = zipfile.ZipFile(io.BytesIO(gh.blobs[artifact["id"]])).read("ledger.sqlite")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledger.sqlite"
        path.write_bytes(data)
        with sqlite3.connect(path) as db:
            (value,) = db.execute(
                f"SELECT s.{column} FROM shards s JOIN pipelines p ON p.id = s.pipeline_id"
                " WHERE p.number = ? AND s.stage = ?",
                (pipeline, stage),
            ).fetchone()
    return value


def _gpu_row(body: str, stage: str) -> list[str]:
    """The GPU time table's row of ``stage``: [GPUs, run, reused, cancelled]."""
    (row,) = [line for line in body.splitlines() if line.startswith(f"| {stage} | 8 x H200")]
    return [cell.strip() for cell in row.strip("|").split("|")][1:]


def test_gpu_minutes_in_the_partial_and_final_reply_are_the_ledgers_durations(
    gh, tmp_path, monkeypatch, capsys
) -> None:
    smi = tmp_path / "bin" / "nvidia-smi"  # the stage jobs' host "has" eight H200s
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\n" + "".join(f"echo '{i}, NVIDIA H200'\n" for i in range(8)))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    jobs = Jobs(gh, tmp_path, monkeypatch, capsys)
    jobs.catalog.write_text(GPU_CATALOG)
    main = jobs.push(1)
    jobs.report(jobs.stages(main), 1)
    monkeypatch.setenv("STAGEBOT_FIXTURE_BROKEN", "1")
    gh.cancel_at_once = False
    outputs = jobs.plan("/bot run --disable-reuse-test", 101)  # main's passes not reused
    assert list(outputs["stage_runs"]) == [EIGHT, STEADY], outputs["log"]
    jobs.report(jobs.stage(outputs, EIGHT), 101)
    partial = _reply(gh, 101)["body"]
    assert "running: 1 of 2 stage(s) done" in partial

    gh.runs[outputs["stage_runs"][STEADY]].update(status="completed", conclusion="cancelled")
    final_outputs, _ = jobs.report(outputs["stage_runs"][STEADY], 101)
    final = _reply(gh, 101)["body"]
    ran = _shard_seconds(gh, final_outputs["ledger_artifact"], 101, EIGHT)
    full = _shard_seconds(gh, "stagebot-ledger-main", 1, STEADY)  # main's last full run
    assert ran > 0 and full > 0
    assert _gpu_row(partial, EIGHT) == ["8 x H200", f"{8 * ran / 60:.1f}", "0.0", "0.0"]
    assert _gpu_row(final, EIGHT) == ["8 x H200", f"{8 * ran / 60:.1f}", "0.0", "0.0"]
    assert _gpu_row(final, STEADY) == ["8 x H200", "0.0", "0.0", f"{8 * full / 60:.1f}"]


MANY = 12
MANY_CATALOG = """
gpu_types:
  CPU: {device_names: [], runner_labels: [ubuntu-latest]}
families:
""" + "".join(
    f"  - {{name: CPU-Build_Step{chr(65 + i)}, kind: build, timeout_minutes: 2, command: 'true'}}\n"
    for i in range(MANY)
)
RUN_READS = ("get_run", "list_workflow_runs")


def test_the_report_jobs_read_the_stage_runs_with_requests_linear_in_the_stages(gh, jobs) -> None:
    """Each of a pipeline's N report jobs reads all N stage runs, up to ROUNDS times: one listing
    of the stage workflow's runs per look keeps the pipeline's reads of runs within a few per
    stage; a request per run would need more than N² (the negative control's bound)."""
    from stagebot.bot.actions.report_run import ROUNDS

    jobs.catalog.write_text(MANY_CATALOG)
    outputs = jobs.plan("/bot run", 101)
    assert len(outputs["stage_runs"]) == MANY, outputs["log"]
    start = len(gh.requests)
    for stage in outputs["stage_runs"]:
        jobs.report(jobs.stage(outputs, stage), 101)
    assert "completed with state SUCCESS" in _reply(gh, 101)["body"]
    reads = [r for r in gh.requests[start:] if r.route in RUN_READS]
    # per report job: its stage run, the plan run, and one listing per look
    assert len(reads) <= MANY * (2 + ROUNDS) < MANY * MANY
    listings = [r for r in reads if r.route == "list_workflow_runs"]
    assert listings and all(r.query["event"] == "workflow_dispatch" for r in listings)
    assert all(r.query["created"].startswith(">=") for r in listings)
    assert all(r.query["branch"] == "stagebot-stage" for r in listings)


def test_mains_pipeline_never_fails_fast_it_is_every_prs_base(gh, toggled) -> None:
    """A post-merge pipeline on main whose first stage ends with a NEW failure keeps its other
    stage runs: PRs read their verdicts and flakiness history against main's pipelines."""
    main = toggled.push(2, sha="b" * 40)
    assert list(main["stage_runs"]) == [FIRST, SLOW], main["log"]
    _, log = toggled.report(toggled.stage(main, FIRST), 2)
    assert f"NEW failure in {FIRST}" in log and "main's pipelines never fail fast" in log
    assert gh.cancel_requested == []
    assert gh.runs[main["stage_runs"][SLOW]]["status"] != "completed"
    outputs, _ = toggled.report(toggled.stage(main, SLOW), 2)
    assert gh.cancel_requested == []
    assert outputs["ledger_artifact"] == "stagebot-ledger-main"
    states = {s: _shard_column(gh, "stagebot-ledger-main", 2, s, "state") for s in (FIRST, SLOW)}
    assert states == {FIRST: "FAILURE", SLOW: "SUCCESS"}  # a base for the PRs' SLOW stage
