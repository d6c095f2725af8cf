"""`bot handle-event`: every rule of the comment handler, through the CLI, with real PyGithub
against the local fake GitHub server. Named cases include the near-misses (Prow's style)."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import json

import pytest
from github_server import FakeGitHub, user_id
from helpers.fake_pr import BOT, PR, SHA, marker_of, record_dispatch, replies, status
from helpers.handle_event import COMMENT_ID, EVENTS, assert_nothing_ran, gh, handle

from stagebot.bot.marker import find_marker


def reactions(gh: FakeGitHub, comment_id: int = COMMENT_ID) -> list[str]:
    return [r["content"] for r in gh.reactions if r["comment_id"] == comment_id]


# ---------------------------------------------------------------- comments that are not for us


@pytest.mark.parametrize(
    ("fixture", "body", "author", "reason"),
    [
        pytest.param("pr_comment_created.json", "LGTM", "writer", "no /bot line", id="plain"),
        pytest.param(
            "pr_comment_created.json",
            "> /bot run\nagreed",
            "writer",
            "no /bot line",
            id="quoted command in a reply",
        ),
        pytest.param(
            "pr_comment_created.json",
            "try:\n```\n/bot run\n```",
            "writer",
            "no /bot line",
            id="command in a code block",
        ),
        pytest.param(
            "pr_comment_created.json",
            "please /bot run",
            "writer",
            "no /bot line",
            id="not at line start",
        ),
        pytest.param("pr_comment_edited.json", "/bot run", "writer", "was edited", id="edited"),
        pytest.param("pr_comment_deleted.json", "/bot run", "writer", "was deleted", id="deleted"),
        pytest.param(
            "issue_comment_created.json", "/bot run", "writer", "is an issue", id="issue not PR"
        ),
        pytest.param("pr_comment_by_bot.json", "/bot run", BOT, "by a bot", id="our own reply"),
        pytest.param(
            "pr_comment_by_bot.json", "/bot run", "dependabot[bot]", "by a bot", id="other bot"
        ),
    ],
)
def test_comments_not_for_the_bot_cause_no_request_at_all(
    gh, handle, fixture, body, author, reason
) -> None:
    result = handle(body, author=author, fixture=fixture, token=None)
    assert_nothing_ran(result)
    assert reason in result.out and result.out.startswith("no-op: ")
    assert gh.requests == []  # not even a read: no token needed, nothing written


def test_unhandled_event_kinds_are_no_ops(handle, gh) -> None:
    result = handle(env={"GITHUB_EVENT_NAME": "pull_request"}, token=None)
    assert_nothing_ran(result)
    assert "pull_request events are not handled" in result.out and gh.requests == []


# ---------------------------------------------------------------- authorization


@pytest.mark.parametrize("author", ["reader", "triager", "stranger"])
def test_unauthorized_run_gets_one_reply_and_nothing_runs(gh, handle, author) -> None:
    gh.add_stage_run(100, pr=PR)  # a live pipeline that an unauthorized comment must not cancel
    gh.add_comment(PR, _running_marker(100), BOT)
    result = handle("/bot run", author=author)
    assert_nothing_ran(result)
    (reply,) = [c for c in replies(gh) if marker_of(c).comment_id == COMMENT_ID]
    assert "needs write permission" in reply["body"] and f"@{author} has" in reply["body"]
    assert status(gh) is None and reactions(gh) == []
    assert gh.calls("cancel_run") == [] and gh.runs[80100]["status"] == "in_progress"
    assert [w.route for w in gh.writes()] == ["create_comment"]


@pytest.mark.parametrize("author", ["writer", "maintainer", "boss", "custom"])
def test_write_or_higher_may_run(gh, handle, author) -> None:
    result = handle("/bot run", author=author)
    assert result.outputs["run"] == "true" and result.matrix


def test_role_name_is_read_not_just_the_legacy_permission(gh, handle) -> None:
    # maintain folds into "write" in the legacy field; skip needs maintain
    assert (
        handle(f'/bot skip --sha {SHA[:12]} --comment "docs only"', author="maintainer").code == 0
    )
    assert status(gh)["state"] == "success"


@pytest.mark.parametrize(
    "command",
    [f'/bot skip --sha {SHA[:12]} --comment "x"', f"/bot reuse-pipeline --sha {SHA[:12]}"],
)
@pytest.mark.parametrize("author", ["writer", "custom", "allowlisted"])
def test_dangerous_commands_need_maintain(gh, handle, tmp_path, command, author) -> None:
    config = tmp_path / "settings.yml"
    config.write_text(f"allowlist: [{{login: allowlisted, id: {user_id('allowlisted')}}}]\n")
    result = handle(command, author=author, args=("--config", str(config)))
    assert_nothing_ran(result)
    (reply,) = replies(gh)
    assert "needs maintain or admin permission" in reply["body"]
    assert status(gh) is None


def test_the_allowlist_stands_in_for_write(gh, handle, tmp_path) -> None:
    config = tmp_path / "settings.yml"
    config.write_text(f"allowlist: [{user_id('reader')}]\n")
    result = handle("/bot run", author="reader", args=("--config", str(config)))
    assert result.outputs["run"] == "true"


def test_the_allowlist_matches_the_user_id_not_the_login(gh, handle, tmp_path) -> None:
    """A login can be renamed and re-registered: the allowlist's id is the person."""
    config = tmp_path / "settings.yml"
    config.write_text(f"allowlist: [{{login: reader, id: {user_id('reader') + 1}}}]\n")
    result = handle("/bot run", author="reader", args=("--config", str(config)))
    assert_nothing_ran(result)
    assert "needs write permission" in replies(gh)[0]["body"]


def test_fork_authors_are_judged_by_permission(gh, handle) -> None:
    gh.add_pull(9, head_sha="f" * 40, author="outsider", fork=True)
    refused = handle("/bot run", author="outsider", number=9, comment_id=1)
    assert_nothing_ran(refused)
    accepted = handle(
        "/bot run --sha ffffffffffff", author="maintainer", number=9, comment_id=2, run_number=102
    )
    assert accepted.outputs["commit"] == "f" * 40
    assert {entry["commit"] for entry in accepted.matrix} == {"f" * 40}


@pytest.mark.parametrize(
    "command",
    ["/bot run --post-merge", "/bot run --add-multi-gpu-test", '/bot run --extra-stage "*"'],
)
def test_plans_needing_approval_need_the_label(gh, handle, command) -> None:
    refused = handle(command, author="boss")
    assert_nothing_ran(refused)
    (reply,) = replies(gh)
    assert "needs the 'ci-approved' label" in reply["body"] and reactions(gh) == []
    gh.label(PR, "ci-approved", "maintainer")
    accepted = handle(command, author="writer", comment_id=COMMENT_ID + 1, run_number=102)
    assert accepted.outputs["run"] == "true"


# ---------------------------------------------------------------- accepted and malformed


def test_accepted_run_reacts_replies_sets_pending_and_writes_the_matrix(gh, handle) -> None:
    result = handle("/bot run")
    assert result.code == 0 and result.outputs["run"] == "true"
    assert result.outputs["pipeline"] == "101" and result.outputs["commit"] == SHA
    assert reactions(gh) == ["eyes"]
    (reply,) = replies(gh)
    assert reply["body"].startswith(f"PR_Github #101 [ run ] triggered by Bot. Commit: `{SHA[:7]}`")
    assert f"{gh.base}/{gh.repo}/actions/runs/50101" in reply["body"]
    marker = marker_of(reply)
    assert (marker.pipeline, marker.commit, marker.comment_id, marker.state) == (
        101,
        SHA,
        COMMENT_ID,
        "RUNNING",
    )
    assert result.outputs["reply_id"] == str(reply["id"])
    entries = result.matrix
    assert {e["pipeline"] for e in entries} == {101} and {e["commit"] for e in entries} == {SHA}
    assert set(marker.stages) >= {e["stage"] for e in entries}
    assert all(e["runner_labels"] for e in entries)
    pending = status(gh)
    assert pending["state"] == "pending" and pending["target_url"].endswith("/runs/50101")


def test_partly_tested_run_leaves_the_status_alone_and_says_so(gh, handle) -> None:
    result = handle('/bot run --stage-list "CPU-PyTorch-1"')
    assert [e["stage"] for e in result.matrix] == ["CPU-PyTorch-1"]
    (reply,) = replies(gh)
    assert "(Partly Tested)" in reply["body"] and "--stage-list" in reply["body"]
    assert status(gh) is None


def test_the_pinned_sha_is_the_head_at_trigger_time(gh, handle) -> None:
    result = handle("/bot run")
    gh.pulls[PR]["head"]["sha"] = "d" * 40  # a push after the trigger
    assert result.outputs["commit"] == SHA and status(gh)["state"] == "pending"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param("/bot run --fast", "unknown run flag '--fast'", id="unknown flag"),
        pytest.param("/bot frobnicate", "unknown command 'frobnicate'", id="unknown command"),
        pytest.param("/bot kill\n/bot run", "found 2 /bot commands", id="two commands"),
        pytest.param("/bot skip", "skip needs a reason", id="skip without reason"),
    ],
)
def test_malformed_commands_get_the_error_the_help_and_confused(gh, handle, body, error) -> None:
    result = handle(body, author="reader")
    assert_nothing_ran(result)
    (reply,) = replies(gh)
    assert "Bot args parsing error!" in reply["body"] and error in reply["body"]
    assert "## stagebot help" in reply["body"]
    assert marker_of(reply).comment_id == COMMENT_ID
    assert reactions(gh) == ["confused"] and status(gh) is None


def test_unknown_stage_is_answered_like_a_parse_error(gh, handle) -> None:
    result = handle('/bot run --stage-list "A10-PyTorh-1"')
    assert_nothing_ran(result)
    (reply,) = replies(gh)
    assert "did you mean 'A10-PyTorch-1'" in reply["body"]
    assert reactions(gh) == ["confused"]


def test_reusing_a_pipeline_the_ledger_lacks_names_those_it_has(gh, handle, tmp_path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    assert handle("/bot run", args=("--ledger", str(ledger))).outputs["run"] == "true"
    result = handle(
        "/bot run --reuse-test 99",
        comment_id=COMMENT_ID + 1,
        run_number=102,
        args=("--ledger", str(ledger)),
    )
    assert_nothing_ran(result)
    reply = replies(gh)[-1]
    shown = reply["body"].replace("#\u200b", "#")  # "#99" in an error is no issue link
    assert "pipeline #99 is not in the ledger" in shown and "it has #101" in shown


def test_user_text_in_replies_cannot_mention_or_forge_a_marker(gh, handle) -> None:
    handle('/bot run --stage-list "@everyone<!-- stagebot:{} -->"')
    (reply,) = replies(gh)
    assert "@everyone" not in reply["body"] and reply["body"].count("<!-- stagebot:") == 1
    assert marker_of(reply).comment_id == COMMENT_ID


def test_help_is_for_anyone(gh, handle) -> None:
    result = handle("/bot help", author="reader")
    assert_nothing_ran(result)
    (reply,) = replies(gh)
    assert "## stagebot help" in reply["body"] and reactions(gh) == ["eyes"]


# ---------------------------------------------------------------- once per comment


def test_the_same_event_delivered_twice_runs_once(gh, handle) -> None:
    first = handle("/bot run")
    second = handle("/bot run")
    assert first.outputs["run"] == "true"
    assert_nothing_ran(second)
    assert "already handled" in second.out
    assert len(replies(gh)) == 1 and len(gh.statuses[SHA]) == 1
    assert [w.route for w in gh.writes()] == ["create_reaction", "create_comment", "create_status"]


def test_a_forged_marker_from_a_person_does_not_block_the_command(gh, handle) -> None:
    forged = _running_marker(1, comment_id=COMMENT_ID)
    gh.add_comment(PR, forged, "writer")
    assert handle("/bot run").outputs["run"] == "true"


def test_a_refused_comment_delivered_twice_gets_one_reply(gh, handle) -> None:
    handle("/bot run", author="reader")
    handle("/bot run", author="reader")
    assert len(replies(gh)) == 1


# ---------------------------------------------------------------- kill, supersede, skip


def _running_marker(pipeline: int, comment_id: int = 1, sha: str = SHA, run: int | None = None):
    from stagebot.bot.marker import ReplyMarker

    marker = ReplyMarker(pipeline, sha, comment_id, "RUNNING", {"CPU-PyTorch-1": "PENDING"}, run)
    return f"PR_Github #{pipeline} [ run ] triggered by Bot.\n\n{marker.render()}"


def test_kill_cancels_running_pipelines_and_marks_them_aborted(gh, handle) -> None:
    gh.add_stage_run(99, status="queued", pr=PR)
    gh.add_stage_run(100, pr=PR)
    gh.add_stage_run(98, status="completed", pr=PR)
    old = [
        gh.add_comment(PR, _running_marker(n, comment_id=n, run=80000 + n), BOT) for n in (99, 100)
    ]
    result = handle("/bot kill", run_number=101)
    assert_nothing_ran(result)
    assert {gh.runs[80099]["conclusion"], gh.runs[80100]["conclusion"]} == {"cancelled"}
    for comment in old:
        assert marker_of(gh.comments[comment["id"]]).state == "ABORTED"
        assert "completed with state ABORTED" in gh.comments[comment["id"]]["body"]
    (reply,) = [c for c in replies(gh) if marker_of(c).comment_id == COMMENT_ID]
    assert "Successfully killed previous jobs" in reply["body"]
    assert "#99" in reply["body"] and "#100" in reply["body"]
    assert reactions(gh) == ["eyes"]


def test_kill_with_nothing_running_says_so(gh, handle) -> None:
    handle("/bot kill")
    (reply,) = replies(gh)
    assert "No running pipeline" in reply["body"] and gh.calls("cancel_run") == []


def test_a_new_run_cancels_the_prs_earlier_run(gh, handle) -> None:
    handle("/bot run", run_number=101, comment_id=1)
    gh.add_stage_run(101, pr=PR)  # the stage run the plan job of #101 dispatched
    record_dispatch(gh, 101, 80101)
    result = handle("/bot run", run_number=102, comment_id=2)
    assert result.outputs["run"] == "true"
    assert gh.runs[80101]["conclusion"] == "cancelled"
    states = {marker_of(c).pipeline: marker_of(c).state for c in replies(gh)}
    assert states == {101: "ABORTED", 102: "RUNNING"}
    (reply,) = [c for c in replies(gh) if marker_of(c).pipeline == 102]
    assert "Stopped the PR's earlier running pipeline(s): #101" in reply["body"]


def test_skip_sets_success_with_reason_and_approver(gh, handle) -> None:
    result = handle(f'/bot skip --sha {SHA[:12]} --comment "docs-only change"', author="maintainer")
    assert_nothing_ran(result)
    success = status(gh)
    assert success["state"] == "success"
    assert success["description"] == "Skipped by @maintainer: docs-only change"
    (reply,) = replies(gh)
    assert "Skipping testing for commit" in reply["body"] and "docs-only change" in reply["body"]


# ---------------------------------------------------------------- pipeline numbers, push, faults


def test_without_run_number_the_pipeline_follows_the_bots_replies(gh, handle) -> None:
    gh.add_comment(PR, _running_marker(41, comment_id=5), BOT)
    result = handle("/bot run", run_number=None)
    assert result.outputs["pipeline"] == "42"


def test_push_to_the_default_branch_plans_post_merge(gh, handle, tmp_path) -> None:
    from stagebot.harness.ledger import Ledger

    ledger = tmp_path / "main.sqlite"
    result = handle(fixture="push_main.json", token=None, args=("--ledger", str(ledger)))
    assert result.outputs["run"] == "true" and result.matrix
    assert {e["commit"] for e in result.matrix} == {"0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"}
    assert gh.requests == []
    record = Ledger.open(ledger, readonly=True).pipeline(101)
    assert (record.branch, record.state, record.pr) == ("main", "RUNNING", None)


def test_push_to_another_branch_is_a_no_op(gh, handle, tmp_path) -> None:
    payload = json.loads((EVENTS / "push_main.json").read_text())
    payload["ref"] = "refs/heads/feature"
    event = tmp_path / "push-feature.json"
    event.write_text(json.dumps(payload))
    result = handle(fixture="push_main.json", token=None, env={"GITHUB_EVENT_PATH": str(event)})
    assert_nothing_ran(result)
    assert "push to refs/heads/feature, not to main" in result.out


def test_unreachable_github_exits_non_zero(gh, handle) -> None:
    gh.fail("5xx", times=100)
    result = handle("/bot run")
    assert result.code == 3 and "Error: could not list the comments" in result.err
    assert result.outputs == {} and gh.writes() == []


def test_a_plan_job_whose_status_write_failed_can_be_re_run(gh, handle, tmp_path) -> None:
    """The reply landed, then the pending status kept failing (exit 3): re-running the plan job
    (the same workflow run) finishes the pipeline instead of answering "already handled"."""
    ledger = tmp_path / "ledger.sqlite"
    gh.fail("5xx", route="create_status", times=100)
    failed = handle("/bot run", args=("--ledger", str(ledger)))
    assert failed.code == 3 and "set" in failed.err and status(gh) is None
    (reply,) = replies(gh)
    assert marker_of(reply).state == "RUNNING"
    gh.faults.clear()
    delivered_again = handle("/bot run", args=("--ledger", str(ledger)))
    assert "already handled" in delivered_again.out, "only a re-run attempt resumes"
    retry = {"GITHUB_RUN_ATTEMPT": "2"}
    again = handle("/bot run", args=("--ledger", str(ledger)), env=retry)
    assert again.code == 0 and again.outputs["run"] == "true", again.out + again.err
    assert again.outputs["pipeline"] == "101" and again.matrix
    assert status(gh)["state"] == "pending" and "PR_Github #101" in status(gh)["description"]
    (edited,) = replies(gh)
    assert edited["id"] == reply["id"] and marker_of(edited).state == "RUNNING"
    later = handle("/bot run", run_number=102, args=("--ledger", str(ledger)), env=retry)
    assert later.outputs["run"] == "false" and "already handled" in later.out


def test_every_endpoint_failing_twice_still_gives_one_reply_and_status(gh, handle) -> None:
    gh.fail_every_endpoint(2, ("5xx-after-write", "403"))
    result = handle("/bot run")
    assert result.code == 0 and result.outputs["run"] == "true"
    assert len(replies(gh)) == 1 and reactions(gh) == ["eyes"]
    assert status(gh)["state"] == "pending"


def test_outputs_and_plan_files(gh, handle, tmp_path) -> None:
    out = tmp_path / "plan-out"
    result = handle("/bot run", args=("--out", str(out)))
    saved = json.loads((out / "outputs.json").read_text())
    assert saved == result.outputs
    plan = json.loads((out / "plan.json").read_text())
    assert plan["commit"] == SHA and plan["pr"] == PR and plan["gating"] is True


HOSTILE = '@everyone `x` | <!-- stagebot:{"pipeline":4242,"state":"RUNNING"} --> <b>&'
REPLY_CONTEXTS = {  # every value a user (or a restored ledger) can influence is HOSTILE
    "aborted": dict(pipeline=3, sha7=HOSTILE, why=HOSTILE),
    "killed": dict(killed=[3], sha7=HOSTILE, login=HOSTILE),
    "malformed": dict(login=HOSTILE, error=HOSTILE + "\n```\n" + HOSTILE, help=""),
    "refused": dict(
        login=HOSTILE, command=HOSTILE, why="needs write", label_missing=False, sha_refused=False
    ),
    "skipped": dict(login=HOSTILE, sha7=HOSTILE, status_context=HOSTILE, reason=HOSTILE),
    "triggered": dict(
        pipeline=3,
        sha7=HOSTILE,
        login=HOSTILE,
        comment_url="https://github.com/o/r/pull/7#c",
        run_url=None,
        command=HOSTILE,
        commit=HOSTILE,
        cancelled=[],
        counts={"run": 1, "reuse": 0, "skip": 0},
        partly_tested_reason=HOSTILE,
        status_context=HOSTILE,
    ),
    "reused": dict(
        ok=True,
        why=HOSTILE,
        source=2,
        sha7="abc1234",
        source_sha7=HOSTILE,
        login=HOSTILE,
        status_context=HOSTILE,
        changed=[HOSTILE, "README.md"],
        stopped=[],
    ),
    "reused-refused": dict(ok=False, why=HOSTILE, source=None, login=HOSTILE),
}


@pytest.mark.parametrize("kind", REPLY_CONTEXTS)
def test_every_reply_template_escapes_user_text(kind) -> None:
    from stagebot.bot.marker import ReplyMarker
    from stagebot.bot.replies import render_reply

    marker = ReplyMarker(9, SHA, COMMENT_ID, "SUCCESS", {})
    body = render_reply(kind.split("-")[0], marker, **REPLY_CONTEXTS[kind])
    assert body.count("<!--") == 1 and body.count("<b>") == 0, body
    assert "@everyone" not in body and "@\u200beveryone" in body
    assert find_marker(body) == marker


def test_escape_is_one_rule_for_replies_and_reports() -> None:
    from stagebot.templates.markdown import code, escape

    assert escape("@team_x <!-- a|b\nc & d") == "@\u200bteam_x &lt;!-- a&#124;b c &amp; d"
    assert code("README.md") == "`README.md`" and code("a`b") == "``a`b``"
    assert code("`x") == "`` `x ``"


# ---------------------------------------------------------------- a damaged restored ledger

CORRUPT = b"SQLite format 3\x00" + b"\xde\xad" * 600  # a header, then garbage


def test_a_corrupt_ledger_does_not_stop_events_that_do_not_need_it(gh, handle, tmp_path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    ledger.write_bytes(CORRUPT)
    result = handle("just a review comment", args=("--ledger", str(ledger)))
    assert_nothing_ran(result)
    assert "no /bot line" in result.out and ledger.read_bytes() == CORRUPT
    result = handle("/bot help", comment_id=COMMENT_ID + 1, args=("--ledger", str(ledger)))
    assert result.code == 0 and ledger.read_bytes() == CORRUPT


def test_a_corrupt_ledger_is_moved_aside_and_the_run_starts_empty(gh, handle, tmp_path) -> None:
    from stagebot.bot.ledger_files import file_digest
    from stagebot.bot.marker import render_ledger_digest
    from stagebot.harness.ledger import Ledger

    ledger = tmp_path / "ledger.sqlite"
    ledger.write_bytes(CORRUPT)  # damaged although the bot saved it (its digest is recorded)
    digest = render_ledger_digest(file_digest(ledger))  # the line right above the marker
    gh.add_comment(
        PR, _running_marker(99).replace("<!-- stagebot:", f"{digest}\n<!-- stagebot:"), BOT
    )
    result = handle("/bot run", args=("--ledger", str(ledger)))
    assert result.code == 0 and result.outputs["run"] == "true", result.err
    (aside,) = tmp_path.glob("ledger.sqlite.rejected-*")
    assert aside.read_bytes() == CORRUPT
    assert Ledger.open(ledger, readonly=True).pipeline(101).state == "RUNNING"
    reply = next(c for c in replies(gh) if marker_of(c).comment_id == COMMENT_ID)
    assert "could not be used" in reply["body"] and aside.name in reply["body"]
    assert marker_of(reply).pipeline == 101 and "could not be used" in result.err


def test_a_corrupt_main_ledger_does_not_stop_the_post_merge_pipeline(handle, tmp_path) -> None:
    ledger = tmp_path / "main.sqlite"
    ledger.write_bytes(CORRUPT)
    result = handle(fixture="push_main.json", token=None, args=("--ledger", str(ledger)))
    assert result.code == 0 and result.outputs["run"] == "true", result.err
    assert len(list(tmp_path.glob("main.sqlite.rejected-*"))) == 1


def test_publish_reads_the_default_branch_from_the_event(tmp_path) -> None:
    from stagebot.bot.cmd_publish import default_branch

    payload = json.loads((EVENTS / "pr_comment_created.json").read_text())
    payload["repository"]["default_branch"] = "trunk"
    event = tmp_path / "event.json"
    event.write_text(json.dumps(payload))
    assert default_branch(str(event)) == "trunk"
    event.write_text("{not json")
    assert default_branch(str(event)) == "main" and default_branch(None) == "main"
