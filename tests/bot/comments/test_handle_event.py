"""`bot handle-event`: every rule of the comment handler. Named cases include the near-misses
(Prow's style).

The rules run the handler directly over the in-memory GitHub (tests/helpers/comment_rules.py,
tests/helpers/memory_github.py, which tests/bot/github/test_github_conformance.py holds to the
adapter); the CLI path (Actions variables, GITHUB_OUTPUT, real PyGithub against the local fake
GitHub server) keeps the tests of what only it does: outputs, faults and retries, push events, the
ledger file."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from github_server import FakeGitHub, user_id
from helpers.comment_rules import (
    BOT,
    COMMENT_ID,
    PR,
    SHA,
    assert_ran_nothing,
    deliver_comment,
    our_replies,
    pr_status,
    pull_request_world,
    reply_to_comment,
)
from helpers.fake_pr import marker_of, replies, status
from helpers.handle_event import EVENTS, assert_nothing_ran, gh, handle
from helpers.memory_github import MemoryGitHub

from stagebot.bot.comments.events import comment_event
from stagebot.bot.config import BotConfig
from stagebot.bot.protocols.marker import find_marker, with_marker


def reactions(gh: FakeGitHub, comment_id: int = COMMENT_ID) -> list[str]:
    return [r["content"] for r in gh.reactions if r["comment_id"] == comment_id]


@pytest.fixture
def github() -> MemoryGitHub:
    return pull_request_world()


# ---------------------------------------------------------------- comments that are not for us


@pytest.mark.parametrize(
    ("body", "author", "event", "reason"),
    [
        pytest.param("LGTM", "writer", {}, "no /bot line", id="plain"),
        pytest.param("> /bot run\nagreed", "writer", {}, "no /bot line", id="quoted command"),
        pytest.param(
            "try:\n```\n/bot run\n```", "writer", {}, "no /bot line", id="command in a code block"
        ),
        pytest.param("please /bot run", "writer", {}, "no /bot line", id="not at line start"),
        pytest.param("/bot run", "writer", {"action": "edited"}, "was edited", id="edited"),
        pytest.param("/bot run", "writer", {"action": "deleted"}, "was deleted", id="deleted"),
        pytest.param(
            "/bot run", "writer", {"is_pull_request": False}, "is an issue", id="issue not PR"
        ),
        pytest.param("/bot run", BOT, {"author_type": "Bot"}, "by a bot", id="our own reply"),
        pytest.param(
            "/bot run", "dependabot[bot]", {"author_type": "Bot"}, "by a bot", id="other bot"
        ),
    ],
)
def test_comments_not_for_the_bot_cause_no_call_at_all(github, body, author, event, reason) -> None:
    outcome = deliver_comment(github, body, author=author, **event)
    assert_ran_nothing(outcome)
    assert reason in outcome.reason and outcome.reason.startswith("no-op: ")
    assert github.calls == []  # not even a read


@pytest.mark.parametrize(
    ("fixture", "fields"),
    [
        (
            "pr_comment_created.json",
            {"action": "created", "is_pull_request": True, "author_type": "User"},
        ),
        ("pr_comment_edited.json", {"action": "edited"}),
        ("pr_comment_deleted.json", {"action": "deleted"}),
        ("issue_comment_created.json", {"is_pull_request": False}),
        ("pr_comment_by_bot.json", {"author_type": "Bot"}),
    ],
)
def test_github_payloads_read_as_the_events_the_rules_get(fixture, fields) -> None:
    """The event fields the rule tests set (deliver_comment's defaults and overrides) are what
    GitHub's payloads of those kinds read as."""
    event = comment_event(json.loads((EVENTS / fixture).read_text()))
    assert {name: getattr(event, name) for name in fields} == fields


def test_a_comment_not_for_the_bot_needs_no_token_and_no_request(gh, handle) -> None:
    result = handle("> /bot run\nagreed", token=None)
    assert_nothing_ran(result)
    assert result.out.startswith("no-op: ") and gh.requests == []


def test_unhandled_event_kinds_are_no_ops(handle, gh) -> None:
    result = handle(env={"GITHUB_EVENT_NAME": "pull_request"}, token=None)
    assert_nothing_ran(result)
    assert "pull_request events are not handled" in result.out and gh.requests == []


# ---------------------------------------------------------------- authorization


@pytest.mark.parametrize("author", ["reader", "triager", "stranger"])
def test_unauthorized_run_gets_one_reply_and_nothing_runs(github, author) -> None:
    github.add_stage_run(100, pr=PR)  # a live pipeline that an unauthorized comment must not cancel
    github.add_comment(PR, _running_marker(100), BOT)
    assert_ran_nothing(deliver_comment(github, "/bot run", author=author))
    reply = reply_to_comment(github)
    assert "needs write permission" in reply.body and f"@{author} has" in reply.body
    assert pr_status(github) is None and github.reactions == []
    assert github.runs[80100].info.status == "in_progress"
    assert github.writes == ["create_comment"]


@pytest.mark.parametrize("author", ["writer", "maintainer", "boss", "custom"])
def test_write_or_higher_may_run(github, author) -> None:
    outcome = deliver_comment(github, "/bot run", author=author)
    assert outcome.run and outcome.matrix


def test_role_name_is_read_not_just_the_legacy_permission(github) -> None:
    # maintain folds into "write" in the legacy field; skip needs maintain
    deliver_comment(github, f'/bot skip --sha {SHA} --comment "docs only"', author="maintainer")
    assert pr_status(github).state == "success"


@pytest.mark.parametrize(
    "command",
    [f'/bot skip --sha {SHA} --comment "x"', f"/bot reuse-pipeline --sha {SHA}"],
)
@pytest.mark.parametrize("author", ["writer", "custom", "allowlisted"])
def test_dangerous_commands_need_maintain(github, command, author) -> None:
    config = BotConfig(allowlist=(user_id("allowlisted"),))
    assert_ran_nothing(deliver_comment(github, command, author=author, config=config))
    (reply,) = our_replies(github)
    assert "needs maintain or admin permission" in reply.body
    assert pr_status(github) is None


def test_the_allowlist_stands_in_for_write(github) -> None:
    config = BotConfig(allowlist=(user_id("reader"),))
    assert deliver_comment(github, "/bot run", author="reader", config=config).run


def test_the_allowlist_matches_the_user_id_not_the_login(github) -> None:
    """A login can be renamed and re-registered: the allowlist's id is the person."""
    config = BotConfig(allowlist=(user_id("reader") + 1,))
    assert_ran_nothing(deliver_comment(github, "/bot run", author="reader", config=config))
    assert "needs write permission" in our_replies(github)[0].body


def test_fork_authors_are_judged_by_permission(github) -> None:
    github.add_pull(9, head_sha="f" * 40, author="outsider", fork=True)
    refused = deliver_comment(github, "/bot run", author="outsider", number=9, comment_id=1)
    assert_ran_nothing(refused)
    accepted = deliver_comment(
        github,
        "/bot run --sha " + "f" * 40,
        author="maintainer",
        number=9,
        comment_id=2,
        run_number=102,
    )
    assert accepted.commit == "f" * 40
    assert {entry["commit"] for entry in accepted.matrix} == {"f" * 40}


@pytest.mark.parametrize(
    "command",
    ["/bot run --post-merge", "/bot run --add-multi-gpu-test", '/bot run --extra-stage "*"'],
)
def test_plans_needing_approval_need_the_label(github, command) -> None:
    assert_ran_nothing(deliver_comment(github, command, author="boss"))
    (reply,) = our_replies(github)
    assert "needs the 'ci-approved' label" in reply.body and github.reactions == []
    github.label(PR, "ci-approved", "maintainer")
    accepted = deliver_comment(
        github, command, author="writer", comment_id=COMMENT_ID + 1, run_number=102
    )
    assert accepted.run


# ---------------------------------------------------------------- accepted and malformed


def test_accepted_run_reacts_replies_sets_pending_and_writes_the_matrix(gh, handle) -> None:
    """The whole CLI path once: the event file, GITHUB_OUTPUT, PyGithub over HTTP."""
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


@pytest.mark.parametrize(
    ("body", "author"),
    [
        ("/bot run", "writer"),
        ("/bot run --fast", "writer"),
        ("/bot run", "reader"),
        ("/bot help", "reader"),
        ("/bot kill", "writer"),
    ],
)
def test_the_rule_tests_handler_answers_as_handle_event_does(gh, handle, github, body, author):
    """deliver_comment builds the handler as `bot handle-event` does: the same comment through
    the CLI over HTTP and directly over the memory fake gives the same outcome and reply."""
    result = handle(body, author=author)
    outcome = deliver_comment(github, body, author=author)
    assert result.out.splitlines()[-1] == outcome.reason
    assert {**result.outputs, "reply_id": ""} == {**outcome.outputs(), "reply_id": ""}

    def shown(text: str) -> str:
        for base in (gh.base, github.base, "https://github.com"):
            text = text.replace(base, "<base>")
        return text

    assert [shown(c["body"]) for c in replies(gh)] == [shown(c.body) for c in our_replies(github)]
    assert reactions(gh) == github.reactions_to(COMMENT_ID)


def test_partly_tested_run_leaves_the_status_alone_and_says_so(github) -> None:
    outcome = deliver_comment(github, '/bot run --stage-list "CPU-PyTorch-1"')
    assert [e["stage"] for e in outcome.matrix] == ["CPU-PyTorch-1"]
    (reply,) = our_replies(github)
    assert "(Partly Tested)" in reply.body and "--stage-list" in reply.body
    assert pr_status(github) is None


def test_the_pinned_sha_is_the_head_at_trigger_time(github) -> None:
    outcome = deliver_comment(github, "/bot run")
    github.push(PR, "d" * 40)  # a push after the trigger
    assert outcome.commit == SHA and pr_status(github).state == "pending"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param("/bot run --fast", "unknown run flag '--fast'", id="unknown flag"),
        pytest.param("/bot frobnicate", "unknown command 'frobnicate'", id="unknown command"),
        pytest.param("/bot kill\n/bot run", "found 2 /bot commands", id="two commands"),
        pytest.param("/bot skip", "skip needs a reason", id="skip without reason"),
    ],
)
def test_malformed_commands_get_the_error_the_help_and_confused(github, body, error) -> None:
    assert_ran_nothing(deliver_comment(github, body, author="reader"))
    (reply,) = our_replies(github)
    assert "Bot args parsing error!" in reply.body and error in reply.body
    assert "## stagebot help" in reply.body
    assert find_marker(reply.body).comment_id == COMMENT_ID
    assert github.reactions_to(COMMENT_ID) == ["confused"] and pr_status(github) is None


def test_unknown_stage_is_answered_like_a_parse_error(github) -> None:
    assert_ran_nothing(deliver_comment(github, '/bot run --stage-list "A10-PyTorh-1"'))
    (reply,) = our_replies(github)
    assert "did you mean 'A10-PyTorch-1'" in reply.body
    assert github.reactions_to(COMMENT_ID) == ["confused"]


@pytest.mark.parametrize(
    ("body", "break_it", "exit_code"),
    [
        pytest.param(
            "/bot run",
            lambda tmp: ("--catalog", str(_write(tmp / "bad.yaml", "families: [oops\n"))),
            2,
            id="a catalog that does not load",
        ),
        pytest.param(
            "/bot reuse-pipeline --sha " + SHA,
            lambda tmp: (),  # no --ledger: the job is set up wrong
            2,
            id="reuse-pipeline without the ledger",
        ),
    ],
)
def test_stagebots_own_failure_is_not_called_a_malformed_command(
    gh, handle, tmp_path, body, break_it, exit_code
) -> None:
    """Issue 32: a catalog or setup failure is the bot's, not the commenter's: the reply says
    stagebot failed (not "parsing error" with the help), and the job fails with the error's
    exit code so that the workflow run shows it."""
    result = handle(body, author="maintainer", args=break_it(tmp_path))
    assert result.code == exit_code
    (reply,) = replies(gh)
    assert "stagebot failed while handling" in reply["body"], reply["body"]
    assert "not a problem with your comment" in reply["body"]
    assert "Bot args parsing error!" not in reply["body"]
    assert "## stagebot help" not in reply["body"]
    assert "stagebot-ledger:" not in reply["body"]  # it vouches for no ledger
    assert "confused" not in reactions(gh) and status(gh) is None


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_reusing_a_pipeline_the_ledger_lacks_names_those_it_has(github, tmp_path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    assert deliver_comment(github, "/bot run", ledger=ledger).run
    outcome = deliver_comment(
        github, "/bot run --reuse-test 99", comment_id=COMMENT_ID + 1, run_number=102, ledger=ledger
    )
    assert_ran_nothing(outcome)
    shown = our_replies(github)[-1].body.replace("#\u200b", "#")  # "#99" is no issue link
    assert "pipeline #99 is not in the ledger" in shown and "it has #101" in shown


def test_user_text_in_replies_cannot_mention_or_forge_a_marker(github) -> None:
    deliver_comment(github, '/bot run --stage-list "@everyone<!-- stagebot:{} -->"')
    (reply,) = our_replies(github)
    assert "@everyone" not in reply.body and reply.body.count("<!-- stagebot:") == 1
    assert find_marker(reply.body).comment_id == COMMENT_ID


def test_help_is_for_anyone(github) -> None:
    assert_ran_nothing(deliver_comment(github, "/bot help", author="reader"))
    (reply,) = our_replies(github)
    assert "## stagebot help" in reply.body and github.reactions_to(COMMENT_ID) == ["eyes"]


# ---------------------------------------------------------------- once per comment


def test_the_same_event_delivered_twice_runs_once(github) -> None:
    assert deliver_comment(github, "/bot run").run
    second = deliver_comment(github, "/bot run")
    assert_ran_nothing(second)
    assert "already handled" in second.reason
    assert len(our_replies(github)) == 1 and len(github.commit_statuses[SHA]) == 1
    assert github.writes == ["react", "create_comment", "set_status"]


def test_a_forged_marker_from_a_person_does_not_block_the_command(github) -> None:
    github.add_comment(PR, _running_marker(1, comment_id=COMMENT_ID), "writer")
    assert deliver_comment(github, "/bot run").run


def test_a_refused_comment_delivered_twice_gets_one_reply(github) -> None:
    deliver_comment(github, "/bot run", author="reader")
    deliver_comment(github, "/bot run", author="reader")
    assert len(our_replies(github)) == 1


# ---------------------------------------------------------------- kill, supersede, skip


def _running_marker(pipeline: int, comment_id: int = 1, sha: str = SHA, run: int | None = None):
    from stagebot.bot.protocols.marker import ReplyMarker

    runs = (run,) if run else ()
    marker = ReplyMarker(pipeline, sha, comment_id, "RUNNING", {"CPU-PyTorch-1": "PENDING"}, runs)
    return f"PR_Github #{pipeline} [ run ] triggered by Bot.\n\n{marker.render()}"


def test_kill_cancels_running_pipelines_and_marks_them_aborted(github) -> None:
    github.add_stage_run(99, status="queued", pr=PR)
    github.add_stage_run(100, pr=PR)
    github.add_stage_run(98, status="completed", pr=PR)
    old = [
        github.add_comment(PR, _running_marker(n, comment_id=n, run=80000 + n), BOT)
        for n in (99, 100)
    ]
    assert_ran_nothing(deliver_comment(github, "/bot kill", run_number=101))
    assert {github.runs[80099].info.conclusion, github.runs[80100].info.conclusion} == {"cancelled"}
    for comment in old:
        body = github.issue_comments[comment.id].body
        assert find_marker(body).state == "ABORTED" and "completed with state ABORTED" in body
    reply = reply_to_comment(github)
    assert "Successfully killed previous jobs" in reply.body
    assert "#99" in reply.body and "#100" in reply.body
    assert github.reactions_to(COMMENT_ID) == ["eyes"]


def test_kill_with_nothing_running_says_so(github) -> None:
    deliver_comment(github, "/bot kill")
    (reply,) = our_replies(github)
    assert "No running pipeline" in reply.body and "cancel_run" not in github.calls


def test_a_new_run_cancels_the_prs_earlier_run(github) -> None:
    deliver_comment(github, "/bot run", run_number=101, comment_id=1)
    github.add_stage_run(101, pr=PR)  # the stage run the plan job of #101 dispatched
    (first,) = our_replies(github)  # what `bot dispatch` does: record the runs in the marker
    marker = replace(find_marker(first.body), stage_runs=(80101,))
    github.issue_comments[first.id] = replace(first, body=with_marker(first.body, marker))
    assert deliver_comment(github, "/bot run", run_number=102, comment_id=2).run
    assert github.runs[80101].info.conclusion == "cancelled"
    states = {find_marker(c.body).pipeline: find_marker(c.body).state for c in our_replies(github)}
    assert states == {101: "ABORTED", 102: "RUNNING"}
    (reply,) = [c for c in our_replies(github) if find_marker(c.body).pipeline == 102]
    assert "Stopped the PR's earlier running pipeline(s): #101" in reply.body


def test_skip_sets_success_with_reason_and_approver(github) -> None:
    outcome = deliver_comment(
        github, f'/bot skip --sha {SHA} --comment "docs-only change"', author="maintainer"
    )
    assert_ran_nothing(outcome)
    success = pr_status(github)
    assert success.state == "success"
    assert success.description == "Skipped by @maintainer: docs-only change"
    (reply,) = our_replies(github)
    assert "Skipping testing for commit" in reply.body and "docs-only change" in reply.body


# ---------------------------------------------------------------- pipeline numbers, push, faults


def test_without_run_number_the_pipeline_follows_the_bots_replies(github) -> None:
    github.add_comment(PR, _running_marker(41, comment_id=5), BOT)
    assert deliver_comment(github, "/bot run", run_number=None).pipeline == 42


def test_push_to_the_default_branch_plans_post_merge(gh, handle, tmp_path) -> None:
    from stagebot.harness.ledger.book import Ledger

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
    from stagebot.bot.comments.replies import render_reply
    from stagebot.bot.protocols.marker import ReplyMarker

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
    from stagebot.bot.custody.files import file_digest
    from stagebot.bot.protocols.marker import render_ledger_digest
    from stagebot.harness.ledger.book import Ledger

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
    from stagebot.bot.comments.events import default_branch

    payload = json.loads((EVENTS / "pr_comment_created.json").read_text())
    payload["repository"]["default_branch"] = "trunk"
    event = tmp_path / "event.json"
    event.write_text(json.dumps(payload))
    assert default_branch(str(event)) == "trunk"
    event.write_text("{not json")
    assert default_branch(str(event)) == "main" and default_branch(None) == "main"
