"""Trust model v2 end to end, as the three workflows run it, on the fake GitHub (real PyGithub):
bot.yml's plan job (`bot fetch-ledger`, `bot handle-event`, `bot dispatch`, its uploads), the
dispatched stage run (`bot run-stage` per entry, its result artifacts) and report.yml's job
(`bot report-run`, its ledger upload). Every job starts in an empty folder: what travels between
them travels as artifacts on the fake server, as on GitHub. The attack tests plant what PR code
or a second workflow could plant and check that the report and the next plan ignore it."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import json
from pathlib import Path

import pytest
from github_server import FakeGitHub
from helpers.fake_pr import PR, marker_of, replies, status
from helpers.workflow_jobs import Jobs, gh, jobs
from helpers.zips import corrupt

from stagebot.harness.ledger.book import Ledger

pytestmark = pytest.mark.slow


def published(gh: FakeGitHub) -> list[str]:
    """The routes of the writes that publish something (the report job's)."""
    return [w.route for w in gh.writes() if w.route in ("edit_comment", "create_status")]


def test_a_comment_runs_in_a_dispatched_stage_run_and_is_reported(gh, jobs) -> None:
    outputs = jobs.whole("/bot run", 101)
    assert len(gh.dispatches) == 2  # one stage run per stage
    for part, dispatch in enumerate(gh.dispatches, start=1):
        assert dispatch["workflow"] == "stage.yml" and dispatch["ref"] == "stagebot-stage"
        assert dispatch["return_run_details"] is True
        title = gh.runs[dispatch["run_id"]]["display_title"]
        assert title == f"stagebot pr-7 pipeline 101 plan-run 50101 part {part}"
    assert list(outputs["stage_runs"].values()) == [d["run_id"] for d in gh.dispatches]
    (reply,) = replies(gh)
    assert "completed with state SUCCESS" in reply["body"] and marker_of(reply).pipeline == 101
    assert status(gh)["state"] == "success"
    assert all(auth is None for auth in gh.blob_auth)  # the token never goes to storage
    assert gh.calls("unknown") == []


def test_a_failures_full_log_links_its_job_in_the_stage_run(gh, tmp_path, monkeypatch, capsys):
    """The report job lists the stage run's jobs (each named after its stage) through the
    Actions API and links a failure's full log to its stage's job, not to the report run."""
    failing = Jobs(gh, tmp_path, monkeypatch, capsys, suite="check_fail.py")
    outputs = failing.plan("/bot run", 103)
    job = gh.add_job(outputs["stage_run"], "CPU-PyTorch-1")
    failing.report(failing.stages(outputs), 103)
    (reply,) = replies(gh)
    assert "completed with state FAILURE" in reply["body"]
    assert f'<a href="{job["html_url"]}">full log</a>' in reply["body"]


def test_the_next_plan_takes_the_ledger_the_report_left_and_reuses_everything(gh, jobs) -> None:
    jobs.whole("/bot run", 101)
    outputs = jobs.plan("/bot run", 102)
    assert outputs["run"] == "true" and json.loads(outputs["matrix"]) == []
    jobs.report(jobs.stages(outputs), 102)
    reply = next(c for c in replies(gh) if marker_of(c).pipeline == 102)
    assert set(marker_of(reply).stages.values()) == {"REUSED"}
    assert "completed with state SUCCESS" in reply["body"]


def test_a_cancelled_stage_run_is_reported_aborted(gh, jobs) -> None:
    outputs = jobs.plan("/bot run", 101)
    for run_id in outputs["stage_runs"].values():
        jobs.gh.runs[run_id].update(status="completed", conclusion="cancelled")
    jobs.report(outputs["stage_run"], 101)
    (reply,) = replies(gh)
    assert "completed with state ABORTED" in reply["body"] and status(gh)["state"] == "error"
    assert "cancelled before this stage finished" in reply["body"]  # the reason, in the reply


def test_a_report_job_that_died_mid_publish_is_finished_by_its_re_run(gh, jobs) -> None:
    """No concurrency group protects a report job: one that dies (or is cancelled) after some
    writes leaves the reply RUNNING; re-running it reads everything again and finishes. One
    that GitHub made fail sets the status to error first (its reply's edit kept failing)."""
    outputs = jobs.plan("/bot run", 101)
    stage_run = jobs.stages(outputs)
    gh.fail("5xx", route="edit_comment", times=20)
    with pytest.raises(AssertionError):  # exit 3: GitHub kept failing the reply's edit
        jobs.report(stage_run, 101)
    assert marker_of(replies(gh)[0]).state == "RUNNING" and status(gh)["state"] == "error"
    assert "re-run the report job" in status(gh)["description"]
    gh.faults.clear()
    jobs.report(stage_run, 101)
    (reply,) = replies(gh)
    assert "completed with state SUCCESS" in reply["body"] and status(gh)["state"] == "success"


def test_a_dispatch_that_landed_despite_an_error_is_not_repeated(gh, jobs) -> None:
    gh.fail("5xx-after-write", route="dispatch")
    outputs = jobs.plan("/bot run", 101)
    assert list(outputs["stage_runs"].values()) == [d["run_id"] for d in gh.dispatches]
    assert [r.fault for r in gh.calls("dispatch")] == ["5xx-after-write", None]


def _planned_without_dispatch(jobs: Jobs) -> None:
    """A plan job up to `bot handle-event` (pipeline #101), in its job folder."""
    jobs.gh.add_run(101, run_id=50101)
    payload = jobs.comment_event("/bot run", PR, "writer", 7101)
    jobs.env(50101, "issue_comment", payload, 101)
    jobs.job("plan")
    jobs.bot("handle-event", "--catalog", str(jobs.catalog), "--out", ".stagebot/plan")


def test_a_github_whose_dispatch_returns_no_run_id_is_an_error(gh, jobs) -> None:
    gh.run_details = False
    _planned_without_dispatch(jobs)
    log = jobs.bot("dispatch", "--plan-dir", ".stagebot/plan", code=3)
    assert log.startswith("Error: ") and "return_run_details" in log, log
    assert not Path(".stagebot/plan/dispatch.json").exists()


def test_a_dispatch_github_refuses_turns_the_pending_status_into_an_error(gh, jobs) -> None:
    gh.fail("5xx", route="dispatch", times=10)
    _planned_without_dispatch(jobs)
    assert status(gh)["state"] == "pending"
    log = jobs.bot("dispatch", "--plan-dir", ".stagebot/plan", code=3)
    assert log.startswith("Error: could not dispatch stage.yml on stagebot-stage"), log
    assert status(gh)["state"] == "error"
    assert status(gh)["description"].startswith("PR_Github #101 could not start its stage run")


def test_a_failed_dispatch_turns_the_status_to_error_when_its_cancels_fail_too(gh, jobs) -> None:
    """The second stage's dispatch fails and GitHub refuses to cancel the first's run: the
    pipeline still gives up (status error), saying which run to cancel by hand."""
    gh.after("dispatch", lambda: gh.fail("5xx", route="dispatch", times=10))
    gh.fail("5xx", route="cancel_run", times=10)
    _planned_without_dispatch(jobs)
    log = jobs.bot("dispatch", "--plan-dir", ".stagebot/plan", code=3)
    (first,) = [d["run_id"] for d in gh.dispatches]
    assert f"stage run {first} could not be cancelled" in log, log
    assert status(gh)["state"] == "error"


def test_a_matrix_too_long_for_a_dispatch_is_refused(gh, jobs, monkeypatch) -> None:
    from stagebot.bot.cli.workflow import dispatch

    monkeypatch.setattr(dispatch, "MAX_MATRIX", 10)
    _planned_without_dispatch(jobs)
    log = jobs.bot("dispatch", "--plan-dir", ".stagebot/plan", code=2)
    assert "more than the 10 characters a workflow_dispatch carries" in log
    assert gh.dispatches == []


# ---------------------------------------------------------------- attacks on the report


def test_a_stage_run_the_bot_did_not_dispatch_is_ignored(gh, jobs) -> None:
    """Anyone who can dispatch stage.yml (or a workflow holding actions: write) can start a run
    titled like the bot's, naming the bot's plan run: its results are never read."""
    outputs = jobs.plan("/bot run", 101)
    title = gh.runs[outputs["stage_run"]]["display_title"]
    gh.add_run(
        1, status="completed", run_id=90001, conclusion="success", **STAGE, display_title=title
    )
    gh.add_artifact(90001, "stagebot-result-CPU-PyTorch-1", {"CPU-PyTorch-1/result.json": b"{}"})
    before = published(gh)
    _, log = jobs.report(90001, 101)
    assert f"plan run 50101 dispatched runs {outputs['stage_runs']}" in log
    assert "not run 90001" in log and published(gh) == before
    assert marker_of(replies(gh)[0]).state == "RUNNING"


STAGE = dict(
    path=".github/workflows/stage.yml", event="workflow_dispatch", head_branch="stagebot-stage"
)


@pytest.mark.parametrize(
    "fields, why",
    [
        ({"path": ".github/workflows/evil.yml"}, "ran .github/workflows/evil.yml"),
        ({"event": "pull_request"}, "was started by pull_request"),
        ({"head_branch": "feature"}, "ran the workflow of 'feature'"),
        ({"head_repo": "attacker/octo-repo"}, "ran code of attacker/octo-repo"),
    ],
)
def test_a_run_that_is_not_the_stage_workflow_on_the_stage_branch_is_ignored(
    gh, jobs, fields, why
) -> None:
    """E.g. a PR's own copy of stage.yml run by `pull_request`: its workflow file is the PR's."""
    jobs.plan("/bot run", 101)
    fake = {**STAGE, "display_title": "stagebot pr-7 pipeline 101 plan-run 50101 part 1", **fields}
    gh.add_run(1, status="completed", run_id=90002, conclusion="success", **fake)
    before = published(gh)
    _, log = jobs.report(90002, 101)
    assert why in log and "nothing is reported" in log and published(gh) == before


def test_a_plan_run_that_is_not_the_bots_is_not_believed(gh, jobs) -> None:
    """The title may name any run; a `pull_request` run of a PR's copy of bot.yml can upload a
    plan and a dispatch record naming the stage run. Only the bot's plan runs count."""
    outputs = jobs.plan("/bot run", 101)
    fake_plan = gh.add_run(2, run_id=90003, event="pull_request", head_branch="feature")
    fake_plan.update(status="completed", conclusion="success")
    record = {"stage_runs": outputs["stage_runs"], "pipeline": 101}
    gh.add_artifact(90003, "stagebot-plan", {"dispatch.json": json.dumps(record).encode()})
    gh.runs[outputs["stage_run"]].update(
        display_title="stagebot pr-7 pipeline 101 plan-run 90003", status="completed"
    )
    before = published(gh)
    _, log = jobs.report(outputs["stage_run"], 101)
    assert "run 90003 was started by pull_request" in log and published(gh) == before


def test_extra_and_misplaced_result_files_are_ignored_and_named(
    gh, tmp_path, monkeypatch, capsys
) -> None:
    """PR code writes what the stage job uploads. A `stagebot-result-zzz` artifact and a
    second shard's result.json inside another shard's artifact (the v1 report merged every
    `stagebot-result-*` artifact into one folder: last path won) change nothing."""
    failing = Jobs(gh, tmp_path, monkeypatch, capsys, suite="check_fail.py")
    outputs = failing.plan("/bot run", 101)
    run_id = outputs["stage_runs"]["CPU-Build_Check"]
    forged = json.dumps({"stage": "CPU-PyTorch-1", "state": "SUCCESS"}).encode()
    gh.add_artifact(run_id, "stagebot-result-zzz-injected", {"zzz-injected/result.json": forged})
    failing.stages(outputs)
    real = next(a for a in gh.artifacts.values() if a["name"] == "stagebot-result-CPU-Build_Check")
    gh.artifacts.pop(real["id"])
    results = sorted(tmp_path.glob("job-*-stage"))[-1] / "results"
    failing.upload_results(
        run_id, "CPU-Build_Check", results, extra={"CPU-PyTorch-1/result.json": forged}
    )
    _, log = failing.report(run_id, 101)
    assert "ignored artifact 'stagebot-result-zzz-injected'" in log
    assert "ignored CPU-PyTorch-1/result.json (outside CPU-Build_Check/)" in log
    (reply,) = replies(gh)
    assert "completed with state FAILURE" in reply["body"] and status(gh)["state"] == "failure"


# ---------------------------------------------------------------- attacks on the ledgers


def _forged_copy(gh: FakeGitHub, artifact: dict, tmp: Path, pipeline: int = 101) -> bytes:
    """The artifact's ledger with ``pipeline`` turned into a FAILURE."""
    import io
    import zipfile

    path = tmp / f"forged-{artifact['id']}.sqlite"
    path.write_bytes(zipfile.ZipFile(io.BytesIO(gh.blobs[artifact["id"]])).read("ledger.sqlite"))
    with Ledger.open(path) as book:
        book.finish_pipeline(pipeline, "FAILURE")
    return path.read_bytes()


def _reported_ledger(gh: FakeGitHub, report_run: int) -> dict:
    (artifact,) = [a for a in gh.artifacts.values() if a["workflow_run"]["id"] == report_run]
    return artifact


def test_a_ledger_artifact_from_a_stage_run_is_never_taken(gh, jobs, tmp_path) -> None:
    """PR code can upload an artifact named like the bot's ledger (the name is public: the
    reply records the digest); only the bot's own runs' artifacts are taken."""
    outputs = jobs.whole("/bot run", 101)
    genuine = _reported_ledger(gh, 60101)
    forged = _forged_copy(gh, genuine, tmp_path)
    gh.add_artifact(outputs["stage_run"], genuine["name"], {"ledger.sqlite": forged})
    again = jobs.plan("/bot run", 102)
    assert f"run {outputs['stage_run']}" not in again["log"]  # never even looked at
    assert json.loads(again["matrix"]) == []  # the genuine ledger: #101 passed, all reused


def test_a_ledger_named_in_someone_elses_comment_is_never_taken(gh, jobs, tmp_path) -> None:
    """A comment can carry a ledger line of its own (with a digest that matches a forged
    artifact PR code uploaded): only the bot's replies name ledgers."""
    import hashlib

    from stagebot.bot.protocols.marker import render_ledger_digest

    outputs = jobs.whole("/bot run", 101)
    forged = _forged_copy(gh, _reported_ledger(gh, 60101), tmp_path)
    digest = hashlib.sha256(forged).hexdigest()
    gh.add_artifact(outputs["stage_run"], f"stagebot-ledger-{digest}", {"ledger.sqlite": forged})
    gh.add_comment(PR, "see " + render_ledger_digest(digest, outputs["stage_run"]), "writer")
    again = jobs.plan("/bot run", 102)
    assert f"run {outputs['stage_run']}" not in again["log"]  # the comment was never read
    assert json.loads(again["matrix"]) == []


def test_a_ledger_whose_bytes_differ_from_its_digest_is_not_used(gh, jobs, tmp_path) -> None:
    """Even from one of the bot's runs, a ledger is used only when its sha256 is the one the
    bot's reply recorded; else the pipeline starts without history and the reply says so."""
    jobs.whole("/bot run", 101)
    genuine = _reported_ledger(gh, 60101)
    gh.artifacts.pop(genuine["id"])
    forged = _forged_copy(gh, genuine, tmp_path)
    gh.add_artifact(60101, genuine["name"], {"ledger.sqlite": forged})
    again = jobs.plan("/bot run", 102)
    assert "holds a ledger whose sha256 is not" in again["log"]
    assert "history of this PR could not be verified" in again["log"]
    assert json.loads(again["matrix"]) != []  # nothing reused from an unvouched ledger


@pytest.mark.parametrize("tamper", ["forged bytes", "artifact gone"])
def test_a_newest_ledger_that_fails_its_check_stops_the_history(gh, jobs, tmp_path, tamper):
    """Issue 43, finding 3: when the newest reply's ledger fails its check, an older reply's
    genuine ledger is never taken instead (a rollback that forgets what came after it): the
    pipeline starts without history and the reply says the history could not be verified."""
    jobs.whole("/bot run", 101)
    jobs.whole("/bot run", 102)  # everything reused; its report saves the newest ledger
    newest = _reported_ledger(gh, 60102)
    gh.artifacts.pop(newest["id"])
    if tamper == "forged bytes":
        forged = _forged_copy(gh, newest, tmp_path, pipeline=102)
        gh.add_artifact(60102, newest["name"], {"ledger.sqlite": forged})
    again = jobs.plan("/bot run", 103)
    assert "took the ledger of reply" not in again["log"]
    assert json.loads(again["matrix"]) != []  # nothing reused from an older history
    reply = next(c for c in replies(gh) if marker_of(c).pipeline == 103)
    assert "history of this PR could not be verified" in reply["body"]
    why = "holds a ledger whose sha256 is not" if tamper == "forged bytes" else "has no artifact"
    assert why in reply["body"] and "run 60102" in reply["body"]


def test_mains_ledger_comes_from_the_bots_report_runs_only(gh, jobs, tmp_path) -> None:
    outputs = jobs.push(201)
    jobs.report(jobs.stages(outputs), 201)
    genuine = next(a for a in gh.artifacts.values() if a["name"] == "stagebot-ledger-main")
    assert genuine["workflow_run"]["id"] == 60201
    forged = _forged_copy(gh, genuine, tmp_path, pipeline=201)
    gh.add_artifact(outputs["stage_run"], "stagebot-ledger-main", {"ledger.sqlite": forged})
    again = jobs.push(202)
    assert f"run {outputs['stage_run']}" not in again["log"]  # never even looked at
    assert "took main's ledger of 0d1a26e from run 60201" in again["log"]
    assert "rejected" not in again["log"]


def _squat(gh: FakeGitHub, name: str, forged: bytes, runs: int = 11) -> None:
    """What a fork PR can do: its `pull_request` runs of any workflow upload artifacts under
    the bot's public ledger names, newer than the bot's own."""
    for i in range(runs):
        run = gh.add_run(900 + i, run_id=91000 + i, event="pull_request", head_branch="feature")
        run.update(path=".github/workflows/ci.yml", status="completed", conclusion="success")
        gh.add_artifact(91000 + i, name, {"ledger.sqlite": forged})


def test_a_prs_ledger_cannot_be_hidden_by_artifacts_squatting_its_name(gh, jobs, tmp_path):
    """Issue 28, finding 2: the reply names the ledger's run; its own artifacts are read."""
    jobs.whole("/bot run", 101)
    genuine = _reported_ledger(gh, 60101)
    _squat(gh, genuine["name"], _forged_copy(gh, genuine, tmp_path))
    again = jobs.plan("/bot run", 102)
    assert "took the ledger of reply" in again["log"] and "from run 60101" in again["log"]
    assert json.loads(again["matrix"]) == []  # the genuine ledger: #101 passed, all reused


def test_mains_ledger_cannot_be_hidden_by_artifacts_squatting_its_name(gh, jobs, tmp_path):
    outputs = jobs.push(201)
    jobs.report(jobs.stages(outputs), 201)
    genuine = next(a for a in gh.artifacts.values() if a["name"] == "stagebot-ledger-main")
    _squat(gh, "stagebot-ledger-main", _forged_copy(gh, genuine, tmp_path, pipeline=201))
    again = jobs.push(202)
    assert "took main's ledger of 0d1a26e from run 60201" in again["log"]
    assert "91000" not in again["log"]


# ---------------------------------------------------------------- artifact downloads (issue 28, 4)


def test_a_502_on_a_ledger_download_is_retried(gh, jobs) -> None:
    jobs.whole("/bot run", 101)
    gh.fail("5xx", route="download_artifact", times=2)
    again = jobs.plan("/bot run", 102)
    assert "took the ledger of reply" in again["log"] and json.loads(again["matrix"]) == []
    assert [r.status for r in gh.calls("download_artifact")][-3:] == [502, 502, 302]


def test_a_ledger_download_that_keeps_failing_is_said_in_the_reply(gh, jobs) -> None:
    jobs.whole("/bot run", 101)
    gh.fail("429", route="download_artifact", times=50)
    again = jobs.plan("/bot run", 102)  # exit 0: the plan job goes on to handle the comment
    assert again["run"] == "true" and json.loads(again["matrix"]) != []  # without history
    reply = next(c for c in replies(gh) if marker_of(c).pipeline == 102)
    assert "The pipeline ledger could not be fetched from GitHub" in reply["body"]
    assert "HTTP 429" in reply["body"] and status(gh)["state"] == "pending"


def test_a_result_download_that_keeps_failing_is_that_stages_error(gh, jobs) -> None:
    """The report's artifact reads are retried; when GitHub keeps failing one, that shard is a
    recorded ERROR that says why, and the status is set: never left RUNNING and pending."""
    outputs = jobs.plan("/bot run", 101)
    stage_run = jobs.stages(outputs)

    def fail_result_downloads() -> None:  # after the plan run's artifacts were read
        gh.fail("5xx", route="download_artifact", times=100)

    gh.after("list_run_artifacts", lambda: gh.after("list_run_artifacts", fail_result_downloads))
    _, log = jobs.report(stage_run, 101)
    assert "could not be downloaded" in log
    (reply,) = replies(gh)
    assert "its result artifact could not be downloaded" in reply["body"]
    assert marker_of(reply).state == "FAILURE" and status(gh)["state"] == "failure"


def test_two_faults_on_each_download_hop_are_retried_on_that_hops_budget(gh, jobs) -> None:
    """Issue 43, finding 4: a download is two requests (the API's redirect, then storage); two
    transient faults on each used up the four tries they shared, and the report exited 3."""
    outputs = jobs.plan("/bot run", 101)
    stage_run = jobs.stages(outputs)
    gh.fail("5xx", route="download_artifact", times=2)
    gh.fail("5xx", route="download_blob", times=2)
    jobs.report(stage_run, 101)
    (reply,) = replies(gh)
    assert "completed with state SUCCESS" in reply["body"] and status(gh)["state"] == "success"
    assert [r.status for r in gh.calls("download_artifact")][:3] == [502, 502, 302]
    assert [r.status for r in gh.calls("download_blob")][:3] == [502, 502, 200]


def test_a_report_that_cannot_be_made_says_so_and_to_re_run_the_report_job(gh, jobs) -> None:
    """Issue 43, finding 4: when the downloads keep failing, the reply (RUNNING until then) and
    the pending status say the report could not be made: `error`, never pending for ever; a
    re-run of the report job then publishes over both."""
    outputs = jobs.plan("/bot run", 101)
    stage_run = jobs.stages(outputs)
    gh.fail("5xx", route="download_blob", times=100)
    with pytest.raises(AssertionError, match="could not download artifact"):  # exit 3
        jobs.report(stage_run, 101)
    (reply,) = replies(gh)
    assert "This pipeline could not be reported: could not download artifact" in reply["body"]
    assert "re-run the report job (workflow run 60101)" in reply["body"]
    assert marker_of(reply).state == "RUNNING"  # so that the re-run publishes
    assert status(gh)["state"] == "error"
    assert (
        status(gh)["description"] == "PR_Github #101 could not be reported: re-run the report job"
    )
    gh.faults.clear()
    jobs.report(stage_run, 101)
    (reply,) = replies(gh)
    assert "completed with state SUCCESS" in reply["body"] and status(gh)["state"] == "success"
    assert "could not be reported" not in reply["body"]


def test_a_killed_pipeline_whose_report_cannot_be_made_is_an_error_not_pending(gh, jobs) -> None:
    """Issue 43, finding 4: /bot kill cancels the stage run, whose report says ABORTED; when
    that report cannot be made, the status must not stay pending either."""
    outputs = jobs.plan("/bot run", 101)
    jobs.plan("/bot kill", 102)
    assert gh.runs[outputs["stage_run"]]["conclusion"] == "cancelled"
    gh.fail("5xx", route="download_blob", times=100)
    with pytest.raises(AssertionError, match="could not download artifact"):  # exit 3
        jobs.report(outputs["stage_run"], 101)
    killed = next(c for c in replies(gh) if marker_of(c).pipeline == 101)
    assert marker_of(killed).state == "ABORTED" and "could not be reported" in killed["body"]
    assert status(gh)["state"] == "error" and "re-run the report job" in status(gh)["description"]


def test_a_failing_report_of_a_decoy_run_touches_no_reply(gh, jobs) -> None:
    """Only the run the bot's dispatch recorded in the reply gets the "could not be reported"
    note: a report that fails for another run titled like it leaves the pipeline alone."""
    outputs = jobs.plan("/bot run", 101)
    jobs.stages(outputs)
    decoy = gh.add_run(1, run_id=77101, **STAGE)
    decoy.update(display_title=DECOY_TITLE, status="completed", conclusion="success")
    gh.fail("5xx", route="download_blob", times=100)
    with pytest.raises(AssertionError, match="has no reply that says RUNNING or ABORTED for run"):
        jobs.report(77101, 101)
    (reply,) = replies(gh)
    assert "could not be reported" not in reply["body"] and status(gh)["state"] == "pending"


# ---------------------------------------------------------------- kill and supersede (issue 28, 5)

DECOY_TITLE = "stagebot pr-7 pipeline 101 plan-run 50101 part 1"


def _decoy(gh: FakeGitHub, run_id: int) -> dict:
    """A fork PR's own copy of stage.yml run by `pull_request`, titled like the bot's run."""
    run = gh.add_run(1, run_id=run_id, **{**STAGE, "event": "pull_request"})
    run.update(head_branch="feature", display_title=DECOY_TITLE)
    return run


def test_kill_cancels_only_the_run_the_bots_dispatch_recorded(gh, jobs) -> None:
    outputs = jobs.plan("/bot run", 101)
    _decoy(gh, 90010)
    jobs.plan("/bot kill", 102)
    assert gh.runs[outputs["stage_run"]]["conclusion"] == "cancelled"
    assert gh.runs[90010]["status"] == "in_progress"  # the decoy was never touched


def test_kill_cancels_the_run_of_a_pipeline_dispatched_before_one_run_per_stage(gh, jobs) -> None:
    """A pipeline running when the bot was upgraded: its reply's marker names its one stage run
    the old way (``stage_run``); /bot kill still cancels that run."""
    outputs = jobs.plan("/bot run", 101)
    reply = next(c for c in replies(gh) if marker_of(c).pipeline == 101)
    runs = ",".join(str(run) for run in outputs["stage_runs"].values())
    assert f'"stage_runs":[{runs}]' in reply["body"]
    reply["body"] = reply["body"].replace(
        f'"stage_runs":[{runs}]', f'"stage_run":{outputs["stage_run"]}'
    )
    jobs.plan("/bot kill", 102)
    assert gh.runs[outputs["stage_run"]]["conclusion"] == "cancelled"
    assert (
        marker_of(next(c for c in replies(gh) if marker_of(c).pipeline == 101)).state == "ABORTED"
    )


def test_a_pipeline_dispatched_before_one_run_per_stage_is_still_reported(gh, jobs) -> None:
    """A pipeline in flight when the bot was upgraded: its plan recorded one stage run for all
    its stages (``stage_run_id``), which holds every stage's result; its report publishes them."""
    import io
    import zipfile

    outputs = jobs.plan("/bot run", 101)
    one = outputs["stage_run"]
    for stage, run_id in outputs["stage_runs"].items():  # the old matrix: every job in one run
        (dispatch,) = [d for d in gh.dispatches if d["run_id"] == run_id]
        (entry,) = json.loads(dispatch["inputs"]["matrix"])
        folder = jobs.job("stage")
        jobs.run_stage(entry, folder / "results")
        jobs.upload_results(one, stage, folder / "results")
        gh.runs[run_id].update(status="completed", conclusion="success")
    (plan_id,) = [a for a, v in gh.artifacts.items() if v["name"] == "stagebot-plan"]
    files = zipfile.ZipFile(io.BytesIO(gh.blobs[plan_id]))
    old = {"stage_run_id": one, "pipeline": 101, "plan_run": 50101, "pr": PR}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("plan.json", files.read("plan.json"))
        archive.writestr("dispatch.json", json.dumps(old))
    gh.blobs[plan_id] = buffer.getvalue()
    _, log = jobs.report(one, 101)
    assert "not a stage run the bot started" not in log
    reply = next(c for c in replies(gh) if marker_of(c).pipeline == 101)
    assert "completed with state SUCCESS" in reply["body"], reply["body"]
    assert all(f"| {stage} |" in reply["body"] for stage in outputs["stage_runs"])


def test_a_stage_run_that_went_on_after_a_kill_publishes_nothing_over_it(gh, jobs) -> None:
    """The review's case: with a decoy about, /bot kill, then the real stage run finishes
    anyway (here: its jobs complete as the cancel lands). Its report never turns the killed
    pipeline's reply into a result nor sets the status from it."""
    outputs = jobs.plan("/bot run", 101)
    _decoy(gh, 90012)
    jobs.plan("/bot kill", 102)
    _, log = jobs.report(jobs.stages(outputs, conclusion="success"), 101)
    assert "was killed or superseded while its stage run went on" in log
    killed = next(c for c in replies(gh) if marker_of(c).pipeline == 101)
    assert marker_of(killed).state == "ABORTED" and "state SUCCESS" not in killed["body"]
    assert status(gh)["state"] == "pending"  # the killed pipeline's, never success


def test_the_dispatch_recovery_never_takes_a_decoy_for_its_run(gh, jobs) -> None:
    """After an ambiguous dispatch failure the plan job looks for the run it started; a
    `pull_request` run of a PR's stage.yml titled alike is not it."""
    gh.fail("5xx-after-write", route="dispatch")
    gh.after("dispatch", lambda: _decoy(gh, 90011))
    outputs = jobs.plan("/bot run", 101)
    assert outputs["stage_run"] == gh.dispatches[0]["run_id"] != 90011


def test_a_result_zip_with_a_corrupt_member_is_that_stages_error(gh, jobs) -> None:
    """Issue 28, finding 7: a bad CRC (or bad deflate data) shows only when the member is read;
    the report records that stage as an ERROR saying so, and the others as they are."""
    import io
    import zipfile

    outputs = jobs.plan("/bot run", 101)
    stage_run = jobs.stages(outputs)
    artifact = next(
        a for a in gh.artifacts.values() if a["name"] == "stagebot-result-CPU-PyTorch-1"
    )
    blob = gh.blobs[artifact["id"]]
    first = zipfile.ZipFile(io.BytesIO(blob)).infolist()[0].filename
    gh.blobs[artifact["id"]] = corrupt(blob, first)
    _, log = jobs.report(stage_run, 101)
    assert f"member {first} cannot be read" in log
    (reply,) = replies(gh)
    assert marker_of(reply).stages == {"CPU-Build_Check": "SUCCESS", "CPU-PyTorch-1": "ERROR"}
    assert "its result artifact could not be read" in reply["body"]
    assert status(gh)["state"] == "failure"


def test_a_job_cannot_write_another_stages_result(gh, tmp_path, monkeypatch, capsys) -> None:
    """What SECURITY.md says (issue 28, finding 10; issue 47: one stage run per stage), shown:
    the CPU-Build_Check job uploads `stagebot-result-CPU-PyTorch-1` in its own stage run; the
    report reads each stage's result only from the run dispatched for that stage, so the claim
    is never read, and CPU-PyTorch-1 (whose own upload is missing) is an ERROR."""
    failing = Jobs(gh, tmp_path, monkeypatch, capsys, suite="check_fail.py")
    outputs = failing.plan("/bot run", 101)
    failing.stages(outputs)
    real = next(a for a in gh.artifacts.values() if a["name"] == "stagebot-result-CPU-PyTorch-1")
    gh.artifacts.pop(real["id"])
    squatter = outputs["stage_runs"]["CPU-Build_Check"]
    results = sorted(tmp_path.glob("job-*-stage"))[-1] / "results"
    passed = json.loads((results / "CPU-Build_Check" / "result.json").read_text())
    claim = {**passed, "stage": "CPU-PyTorch-1", "state": "SUCCESS", "tests": []}
    forged = {"CPU-PyTorch-1/result.json": json.dumps(claim).encode()}
    gh.add_artifact(squatter, "stagebot-result-CPU-PyTorch-1", forged)
    _, log = failing.report(squatter, 101)
    assert "ignored artifact 'stagebot-result-CPU-PyTorch-1' of run" in log
    assert marker_of(replies(gh)[0]).stages["CPU-PyTorch-1"] == "ERROR"
    gh.add_artifact(outputs["stage_runs"]["CPU-PyTorch-1"], "stagebot-result-CPU-PyTorch-1", forged)
    failing.report(squatter, 101)  # the same claim in CPU-PyTorch-1's own run is its result
    assert marker_of(replies(gh)[0]).stages["CPU-PyTorch-1"] == "SUCCESS"


# ---------------------------------------------------------------- a missing report (issue 28, 11)


def test_a_finished_stage_run_no_report_published_is_detected_and_said(gh, jobs) -> None:
    """Whether workflow_run fires for a stage run dispatched with GITHUB_TOKEN is not documented:
    when no report follows, the next plan job finds the pipeline's recorded stage run finished
    while its reply still says RUNNING, and says so in that reply."""
    outputs = jobs.plan("/bot run", 101)
    jobs.stages(outputs)  # the run completes; no report.yml run follows
    jobs.plan("/bot run", 102)
    old = next(c for c in replies(gh) if marker_of(c).pipeline == 101)
    assert marker_of(old).state == "ABORTED"
    last = outputs["stage_runs"]["CPU-Build_Check"]
    assert f"Its stage run {last} had already finished (success), but no report run" in old["body"]
    assert "set up the bot's GitHub App" in old["body"]
