"""End to end, as the bot workflow runs it: payload -> `bot handle-event` -> matrix ->
`bot run-stage` per entry (a seconds-long test-only stage) -> `bot publish` -> exactly one bot
reply on the PR, edited into the final report, and the right status on the pinned SHA. Real
PyGithub against the local fake GitHub; the ledger travels between the steps as a file."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.fake_pr import BOT, PR, SHA, marker_of, record_dispatch, replies, status
from helpers.workflow_jobs import Jobs, gh, jobs, ledger_state

from stagebot.harness.ledger.book import Ledger

pytestmark = pytest.mark.slow


def test_a_comment_ends_in_one_reply_edited_into_the_report_and_a_status(gh, jobs) -> None:
    outputs = jobs.publish_whole("/bot run", 101)
    assert {e["stage"] for e in json.loads(outputs["matrix"])} == {
        "CPU-PyTorch-1",
        "CPU-Build_Check",
    }
    (reply,) = replies(gh)
    assert reply["body"].startswith(
        f"PR_Github #101 [ run ] completed with state SUCCESS. Commit: `{SHA[:7]}`"
    )
    marker = marker_of(reply)
    assert (marker.pipeline, marker.comment_id, marker.state) == (101, 7101, "SUCCESS")
    assert marker.stages == {"CPU-PyTorch-1": "SUCCESS", "CPU-Build_Check": "SUCCESS"}
    assert status(gh)["state"] == "success"
    assert [s["state"] for s in gh.statuses[SHA]] == ["pending", "success"]
    assert ledger_state(jobs, 101) == "SUCCESS"
    assert len(gh.calls("create_comment", ok_only=True)) == 1
    assert [r.path for r in gh.requests if r.route == "unknown"] == []  # only known endpoints


def test_with_every_endpoint_failing_twice_there_is_still_one_reply_and_the_status(
    gh, jobs
) -> None:
    gh.fail_every_endpoint(2, ("5xx-after-write", "429"))
    jobs.publish_whole("/bot run", 101)
    (reply,) = replies(gh)
    assert marker_of(reply).state == "SUCCESS" and "completed with state SUCCESS" in reply["body"]
    assert status(gh)["state"] == "success"
    assert any(r.fault == "5xx-after-write" for r in gh.calls("create_comment"))
    assert any(r.fault == "5xx-after-write" for r in gh.calls("edit_comment"))


def test_a_failing_stage_sets_failure(gh, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    failing = Jobs(gh, tmp_path, monkeypatch, capsys, suite="check_fail.py")
    failing.publish_whole("/bot run", 101)
    (reply,) = replies(gh)
    assert "completed with state FAILURE" in reply["body"]
    assert status(gh)["state"] == "failure"
    assert ledger_state(failing, 101) == "FAILURE"


@pytest.mark.parametrize(
    ("suite", "state"), [("check_fail.py", "failure"), ("check_basic.py", "error")]
)
def test_a_gating_run_with_a_stage_that_could_not_run_says_the_status_it_sets(
    gh, tmp_path, monkeypatch, capsys, suite, state
) -> None:
    """The stage job of a GPU stage found no such GPU (NOT_RUN): the reply says what publish
    sets, never "Partly Tested" (the run is gating)."""
    monkeypatch.chdir(tmp_path)
    run = Jobs(gh, tmp_path, monkeypatch, capsys, suite=suite)
    gpu = (
        "  H200: {arch: sm_90a, device_names: ['NVIDIA H200*'], runner_labels: [gpu-h200]}\n"
        "families:\n"
        "  - {name: H200-PyTorch, kind: test, timeout_minutes: 2,"
        " suites: [{path: tests/fixtures/suites/check_basic.py}]}\n"
    )
    run.catalog.write_text(run.catalog.read_text().replace("families:\n", gpu, 1))
    run.publish_whole("/bot run", 101)
    (reply,) = replies(gh)
    assert status(gh)["state"] == state
    assert f"The PR's status is set to **{state}**" in reply["body"]
    assert "Partly Tested" not in reply["body"].split("#### Re-running")[0]
    assert "| H200-PyTorch-1 | NOT_RUN |" in reply["body"]


def test_the_report_links_each_failure_to_its_stage_job(gh, tmp_path, monkeypatch, capsys):
    """The report job lists its run's jobs (the Actions API) and links a failure's full log."""
    monkeypatch.chdir(tmp_path)
    failing = Jobs(gh, tmp_path, monkeypatch, capsys, suite="check_fail.py")
    job = gh.add_job(50000 + 102, "CPU-PyTorch-1")
    gh.add_job(50000 + 102, "plan (authorize, reply, matrix)")
    failing.publish_whole("/bot run", 102)
    (reply,) = replies(gh)
    assert f'<a href="{job["html_url"]}">full log</a>' in reply["body"]
    assert any(r.route == "list_jobs" for r in gh.requests)


def test_a_partly_tested_run_leaves_the_status_alone(gh, jobs) -> None:
    jobs.publish_whole('/bot run --stage-list "CPU-PyTorch-1"', 101)
    (reply,) = replies(gh)
    assert "(Partly Tested)" in reply["body"] and status(gh) is None


def test_a_cancelled_pipeline_is_reported_aborted(gh, jobs) -> None:
    outputs = jobs.handle_comment("/bot run", 101)
    assert outputs["run"] == "true"
    jobs.publish(101, jobs.tmp / "no-results", "--cancelled")
    (reply,) = replies(gh)
    assert "completed with state ABORTED" in reply["body"]
    assert marker_of(reply).state == "ABORTED" and status(gh)["state"] == "error"
    assert ledger_state(jobs, 101) == "ABORTED"


def test_a_superseded_pipeline_does_not_overwrite_the_newer_status(gh, jobs) -> None:
    jobs.handle_comment("/bot run", 101)
    outputs = jobs.handle_comment("/bot run", 102)  # supersedes #101 (marks it ABORTED)
    assert ledger_state(jobs, 101) == "ABORTED"
    text = jobs.publish(101, jobs.tmp / "none", "--cancelled")
    assert "belongs to another pipeline" in text
    assert status(gh)["description"].startswith("PR_Github #102 ")
    jobs.publish(102, jobs.stage_jobs(outputs, 102))
    assert status(gh)["state"] == "success"
    states = {marker_of(c).pipeline: marker_of(c).state for c in replies(gh)}
    assert states == {101: "ABORTED", 102: "SUCCESS"}


def test_pipeline_12_does_not_own_the_status_of_pipeline_123(gh, jobs) -> None:
    """Ownership is the whole number: "#12" is a prefix of "#123", not its owner."""
    jobs.handle_comment("/bot run", 12)
    jobs.handle_comment("/bot run", 123)  # supersedes #12
    text = jobs.publish(12, jobs.tmp / "none", "--cancelled")
    assert "belongs to another pipeline" in text
    assert status(gh)["description"].startswith("PR_Github #123 ")


def test_a_second_run_on_the_same_commit_reuses_everything(gh, jobs) -> None:
    jobs.publish_whole("/bot run", 101)
    outputs = jobs.handle_comment("/bot run", 102)
    assert outputs["run"] == "true" and json.loads(outputs["matrix"]) == []
    jobs.publish(102, jobs.tmp / "nothing-ran")
    reply = next(c for c in replies(gh) if marker_of(c).pipeline == 102)
    assert set(marker_of(reply).stages.values()) == {"REUSED"}
    assert "completed with state SUCCESS" in reply["body"] and status(gh)["state"] == "success"


def test_reuse_pipeline_validates_a_new_head_from_a_passed_pipeline(gh, jobs) -> None:
    jobs.publish_whole("/bot run", 101)
    new_head = "e" * 40
    gh.push(PR, new_head)
    gh.diffs[(SHA, new_head)] = ["README.md"]
    outputs = jobs.handle_comment(
        f"/bot reuse-pipeline --sha {new_head} #101", 102, author="maintainer"
    )
    assert outputs["run"] == "false"
    validated = gh.latest_status(new_head, "stagebot")
    assert (
        validated["state"] == "success"
        and "Validated by PR_Github #101" in (validated["description"])
    )
    reply = next(c for c in replies(gh) if marker_of(c).comment_id == 7102)
    assert "Reusing PR_Github #101" in reply["body"] and "`README.md`" in reply["body"]


def test_reuse_pipeline_of_a_failed_pipeline_is_refused(gh, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    failing = Jobs(gh, tmp_path, monkeypatch, capsys, suite="check_fail.py")
    failing.publish_whole("/bot run", 101)
    failing.handle_comment(f"/bot reuse-pipeline --sha {SHA} 101", 102, author="maintainer")
    reply = next(c for c in replies(gh) if marker_of(c).comment_id == 7102)
    shown = reply["body"].replace("#\u200b", "#")  # "#101" in a reason is no issue link
    assert "was not applied: pipeline #101 ended FAILURE" in shown
    assert status(gh)["state"] == "failure"


def test_kill_marks_the_ledger_pipeline_aborted(gh, jobs) -> None:
    gh.add_stage_run(101, pr=PR)
    jobs.handle_comment("/bot run", 101)
    record_dispatch(gh, 101, 80101)
    assert ledger_state(jobs, 101) == "RUNNING"
    jobs.handle_comment("/bot kill", 102)
    assert ledger_state(jobs, 101) == "ABORTED"
    assert gh.runs[80101]["conclusion"] == "cancelled"
    assert BOT  # the replies are the bot's (see replies())


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda text: text[: len(text) // 2], id="truncated"),
        pytest.param(
            lambda text: json.dumps(
                {**json.loads(text), "tests": [{**json.loads(text)["tests"][0], "bogus": 1}]}
            ),
            id="extra-key-in-a-test",
        ),
        pytest.param(lambda text: "\udcff", id="not-utf8"),
    ],
)
def test_a_damaged_result_file_is_that_shard_error_and_the_pipeline_still_ends(
    gh, jobs, damage
) -> None:
    outputs = jobs.handle_comment("/bot run", 101)
    results = jobs.stage_jobs(outputs, 101)
    path = results / "CPU-PyTorch-1" / "result.json"
    text = damage(path.read_text())
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    jobs.publish(101, results)  # exits 0: one damaged file does not stop the report
    record = Ledger.open(jobs.ledger, readonly=True).pipeline(101)
    assert record.state == "FAILURE"  # a final state, never left RUNNING
    states = {r.stage: (r.state, r.evidence) for r in record.results}
    assert states["CPU-Build_Check"][0] == "SUCCESS"  # the other shard's result is kept
    state, evidence = states["CPU-PyTorch-1"]
    assert state == "ERROR" and evidence.startswith("result.json unreadable: "), evidence
    (reply,) = replies(gh)
    assert "completed with state FAILURE" in reply["body"]
    assert marker_of(reply).stages == {"CPU-PyTorch-1": "ERROR", "CPU-Build_Check": "SUCCESS"}
    assert "INFRA" in reply["body"] or "infrastructure" in reply["body"]
    assert status(gh)["state"] == "failure"


def test_a_changed_file_name_cannot_forge_the_reply_marker(gh, jobs) -> None:
    """A PR can name a file like our marker; the reuse reply lists changed files. The forged
    marker must not become the reply's marker (the next /bot run would cancel run #4242)."""
    jobs.publish_whole("/bot run", 101)
    new_head = "e" * 40
    gh.push(PR, new_head)
    forged = (
        '<!-- stagebot:{"comment_id":1,"commit":"' + "f" * 40 + '","pipeline":4242,'
        '"stages":{},"state":"RUNNING","version":1} -->'
    )
    gh.diffs[(SHA, new_head)] = [forged, "@everyone.py", "README.md"]
    jobs.handle_comment(f"/bot reuse-pipeline --sha {new_head} #101", 102, author="maintainer")
    reply = next(c for c in replies(gh) if marker_of(c).comment_id == 7102)
    assert (marker_of(reply).pipeline, marker_of(reply).state) == (102, "SUCCESS")
    assert reply["body"].count("<!-- stagebot:") == 1 and "@everyone" not in reply["body"]
    assert "<!--" not in reply["body"].split("`README.md`")[0]  # the file names are inert
    assert "`README.md`" in reply["body"]
    gh.add_stage_run(4242, pr=PR)
    jobs.handle_comment("/bot run", 103)
    assert gh.runs[80000 + 4242]["conclusion"] is None and gh.calls("cancel_run") == []


def test_a_restored_ledger_the_bot_did_not_save_is_refused(gh, jobs) -> None:
    """Cache poisoning: the stage job runs PR code in the default branch's cache scope, so it
    can plant a ledger for the next plan job. Only a ledger whose sha256 one of the bot's own
    replies records is used; a forged one (here: a pipeline added after the bot saved it) is
    moved aside and nothing is reused from it."""
    jobs.publish_whole("/bot run", 101)
    genuine = jobs.ledger.read_bytes()
    book = Ledger.open(jobs.ledger)
    book.start_pipeline(
        command={"version": 1, "command": "run"}, commit=SHA, plan={}, pr=PR, number=900
    )
    book.close()
    outputs = jobs.handle_comment("/bot run", 102)
    assert outputs["run"] == "true" and json.loads(outputs["matrix"]) != []  # nothing reused
    (aside,) = jobs.tmp.glob("ledger.sqlite.rejected-*")
    assert aside.read_bytes() != genuine
    reply = next(c for c in replies(gh) if marker_of(c).pipeline == 102)
    assert "its sha256 is in none of the bot's replies on this PR" in reply["body"]


def test_the_ledger_the_bot_saved_is_accepted_after_kill(gh, jobs) -> None:
    jobs.handle_comment("/bot run", 101)  # the plan job's reply records the ledger it handed on
    jobs.handle_comment("/bot kill", 102)
    assert ledger_state(jobs, 101) == "ABORTED"
    jobs.publish_whole("/bot run", 103)  # the kill reply recorded the ledger the kill job saved
    assert list(jobs.tmp.glob("*.rejected-*")) == []


def test_publish_with_a_corrupt_ledger_exits_3_and_leaves_it_untouched(gh, jobs) -> None:
    outputs = jobs.handle_comment("/bot run", 101)
    results = jobs.stage_jobs(outputs, 101)
    damaged = b"SQLite format 3\x00" + b"\xde\xad" * 600
    jobs.ledger.write_bytes(damaged)
    text = jobs.publish(101, results, code=3, plan=False)
    assert f"ledger {jobs.ledger} is corrupt" in text, text
    assert jobs.ledger.read_bytes() == damaged


@pytest.mark.parametrize("replace", ["plan", "ledger", "planted WAL"])
def test_a_plan_artifact_replaced_after_the_plan_job_publishes_nothing(gh, jobs, replace) -> None:
    """The report job checks plan.json and the ledger (and that no SQLite side file appeared)
    against the digest the plan job left as a job output: a replaced artifact exits 3, leaves
    the reply as the plan job wrote it, the status pending and the ledger untouched."""
    outputs = jobs.handle_comment("/bot run", 101)
    results = jobs.stage_jobs(outputs, 101)
    plan = jobs.tmp / "plan-101" / "plan.json"
    if replace == "plan":  # every shard marked reused
        text = plan.read_text()
        plan.write_text(text.replace('"action": "run"', '"action": "reuse"'))
        assert plan.read_text() != text
    elif replace == "ledger":
        with Ledger.open(jobs.ledger) as book:
            book.finish_pipeline(101, "SUCCESS")
    else:
        Path(f"{jobs.ledger}-wal").write_bytes(b"\x37\x7f\x06\x82" + bytes(28))
    ledger_bytes = jobs.ledger.read_bytes()
    (reply_before,) = replies(gh)
    text = jobs.publish(101, results, "--artifact-digest", outputs["artifact_digest"], code=3)
    assert "the plan artifact" in text and "nothing is published" in text, text
    assert replies(gh) == [reply_before]
    assert [s["state"] for s in gh.statuses[SHA]] == ["pending"]
    assert jobs.ledger.read_bytes() == ledger_bytes


def test_the_untouched_artifact_matches_its_digest(gh, jobs) -> None:
    outputs = jobs.handle_comment("/bot run", 101)
    assert len(outputs["artifact_digest"]) == 64
    jobs.publish(
        101, jobs.stage_jobs(outputs, 101), "--artifact-digest", outputs["artifact_digest"]
    )
    assert marker_of(replies(gh)[0]).state == "SUCCESS"


def test_artifact_digest_tells_an_absent_file_from_an_empty_one(tmp_path) -> None:
    from stagebot.bot.custody.files import artifact_digest, artifact_files

    plan, ledger = tmp_path / "plan.json", tmp_path / "ledger.sqlite"
    plan.write_text("{}")
    ledger.write_bytes(b"x")
    files = artifact_files(plan, ledger)
    assert [f.name for f in files[2:]] == [
        "ledger.sqlite-wal",
        "ledger.sqlite-shm",
        "ledger.sqlite-journal",
    ]
    clean = artifact_digest(files)
    (tmp_path / "ledger.sqlite-wal").write_bytes(b"")
    assert artifact_digest(files) != clean
    (tmp_path / "ledger.sqlite-wal").unlink()
    assert artifact_digest(files) == clean
    plan.write_text("{} ")
    assert artifact_digest(files) != clean


PUSHED = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"  # push_main.json's "after"


def test_main_ledger_is_vouched_for_by_a_status_and_used_by_the_next_push(gh, jobs) -> None:
    from stagebot.bot.custody.files import file_digest
    from stagebot.bot.custody.main_ledger import LEDGER_STATUS, status_description

    log = jobs.post_merge(201)
    (recorded,) = [s for s in gh.statuses[PUSHED] if s["context"] == LEDGER_STATUS]
    assert recorded["description"] == status_description(file_digest(jobs.ledger), 50201)
    assert f"{LEDGER_STATUS} status of {PUSHED[:7]}" in log
    jobs.handle_push(202)
    assert list(jobs.tmp.glob("*.rejected-*")) == []
    assert ledger_state(jobs, 201) == "SUCCESS" and ledger_state(jobs, 202) == "RUNNING"


@pytest.mark.parametrize("forgery", ["changed", "planted WAL"])
def test_a_main_ledger_no_status_vouches_for_is_moved_aside(gh, jobs, forgery) -> None:
    jobs.post_merge(201)
    if forgery == "changed":  # e.g. a cache entry saved by PR code with history of its own
        with Ledger.open(jobs.ledger) as book:
            book.finish_pipeline(201, "FAILURE")
    else:
        Path(f"{jobs.ledger}-wal").write_bytes(b"\x37\x7f\x06\x82" + bytes(28))
    _, log = jobs.handle_push(202)
    expected = {
        "changed": "its sha256 is in none of the stagebot/ledger statuses of the commit it names",
        "planted WAL": "ledger.sqlite-wal lay beside it",
    }[forgery]
    assert expected in log
    assert len(list(jobs.tmp.glob("ledger.sqlite.rejected-*Z"))) == 1  # side files follow
    with Ledger.open(jobs.ledger, readonly=True) as book:
        assert book.pipeline(201) is None and book.pipeline(202).state == "RUNNING"


def test_a_pr_report_compares_with_main_only_when_a_status_vouches_for_it(
    gh, jobs, tmp_path, monkeypatch, capsys
) -> None:
    main = Jobs(gh, tmp_path, monkeypatch, capsys)
    main.ledger = tmp_path / "main.sqlite"
    main.post_merge(201)
    outputs = jobs.handle_comment("/bot run", 101)
    results = jobs.stage_jobs(outputs, 101)
    base = ["--base-ledger", str(main.ledger)]
    assert "main's ledger" not in jobs.publish(101, results, *base)
    with Ledger.open(main.ledger) as book:
        book.finish_pipeline(201, "FAILURE")
    outputs = jobs.handle_comment("/bot run", 102)
    log = jobs.publish(102, jobs.stage_jobs(outputs, 102), *base)
    assert f"warning: main's ledger {main.ledger} is not one the bot saved" in log
    with Ledger.open(jobs.ledger, readonly=True) as book:  # the base each report used
        assert book.pipeline(101).meta["base_pipeline"] == 201
        assert book.pipeline(102).meta["base_pipeline"] != 201


@pytest.mark.parametrize("commit", ["../../../attacker/evil/statuses/" + "a" * 40, "b" * 40])
def test_a_main_ledger_naming_no_real_commit_vouches_for_nothing(gh, jobs, commit) -> None:
    """The commit comes from the untrusted file: a path is never requested, and a SHA GitHub
    does not know (404) has no statuses; either way the ledger is moved aside, exit 0."""
    with Ledger.open(jobs.ledger) as book:
        book.start_pipeline(commit=commit, command={}, plan={}, branch="main", number=7)
    gh.fail("404", route="list_statuses", times=5)
    _, log = jobs.handle_push(201)
    assert "is not one the bot saved" in log
    assert len(list(jobs.tmp.glob("ledger.sqlite.rejected-*Z"))) == 1
    asked = [r.path for r in gh.calls("list_statuses")]
    assert all("attacker" not in path for path in asked) and len(asked) == (commit[0] == "b")
