"""Attack tests (issue 13, findings 1, 5 and 6): a command applies only to the commit its author
named, the approval label only when an approver added it on the head, and one commenter cannot
flood the bot. The comment handler over the in-memory GitHub; `bot gate` through the CLI, real
PyGithub against the fake GitHub."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import pytest
from github_server import user_id
from helpers.comment_rules import (
    PR,
    SHA,
    assert_ran_nothing,
    deliver_comment,
    our_replies,
    pr_status,
    pull_request_world,
)
from helpers.fake_pr import replies
from helpers.handle_event import gh, handle
from helpers.memory_github import MemoryGitHub

from stagebot.bot.config import BotConfig

BAD = "bad0" + "1" * 36  # what the PR's author pushes after the review
GROUND = SHA[:12] + "f" * 28  # a commit ground to share the reviewed commit's 12-digit prefix


@pytest.fixture
def github() -> MemoryGitHub:
    return pull_request_world()


def refusal(github: MemoryGitHub) -> str:
    (reply,) = our_replies(github)
    assert "was not run" in reply.body, reply.body
    return reply.body


def status_of(github: MemoryGitHub, sha: str):
    return github.latest_status(sha, "stagebot")


# ---------------------------------------------------------------- finding 1: --sha


def test_skip_without_sha_is_refused_and_names_the_head(github) -> None:
    github.push(PR, BAD)  # the author pushes right after the maintainer's review
    outcome = deliver_comment(github, '/bot skip --comment "reviewed"', author="maintainer")
    assert_ran_nothing(outcome)
    assert pr_status(github) is None and status_of(github, BAD) is None
    assert f"needs --sha naming the commit you reviewed; the PR's head is `{BAD}`" in refusal(
        github
    )


@pytest.mark.parametrize(
    "command", ['/bot skip --sha {sha} --comment "docs"', "/bot reuse-pipeline --sha {sha}"]
)
def test_a_push_after_the_review_voids_a_dangerous_command(github, command) -> None:
    github.push(PR, BAD)
    outcome = deliver_comment(github, command.format(sha=SHA), author="maintainer")
    assert_ran_nothing(outcome)
    assert status_of(github, BAD) is None and pr_status(github) is None
    body = refusal(github)
    assert f"--sha {SHA} is not the PR's head {BAD}" in body  # both SHAs
    assert "comment the command again with its full SHA" in body


def test_skip_with_the_heads_sha_applies_to_that_commit(github) -> None:
    deliver_comment(github, f'/bot skip --sha {SHA.upper()} --comment "docs"', author="maintainer")
    assert pr_status(github).state == "success"


def test_run_on_a_non_writers_pr_needs_the_sha(github) -> None:
    github.add_pull(9, head_sha="f" * 40, author="outsider", fork=True)
    refused = deliver_comment(github, "/bot run", author="writer", number=9, comment_id=1)
    assert_ran_nothing(refused)
    assert "lacks write permission, so `/bot run` needs --sha" in our_replies(github, 9)[0].body
    github.push(9, BAD)  # the fork's author pushes after the writer reviewed ffff…
    moved = deliver_comment(
        github, "/bot run --sha " + "f" * 40, author="writer", number=9, comment_id=2
    )
    assert_ran_nothing(moved)
    accepted = deliver_comment(
        github, f"/bot run --sha {BAD}", author="writer", number=9, comment_id=3, run_number=102
    )
    assert accepted.run and accepted.commit == BAD
    reply = our_replies(github, 9)[-1].body
    assert f"Testing commit `{BAD}`" in reply  # the triggered reply names the full SHA


def test_a_prefix_collided_before_the_comment_is_refused(github) -> None:
    """Issue 43, finding 1: the author force-pushes, before the comment, a commit sharing the
    reviewed commit's 12-digit prefix; the reviewed commit leaves the PR's commit list and no
    push follows the comment, so only the full SHA tells the two apart."""
    github.add_pull(9, head_sha=SHA, author="outsider", fork=True)
    github.push(9, GROUND, force=True)
    ran = deliver_comment(
        github, f"/bot run --sha {SHA[:12]}", author="writer", number=9, comment_id=1
    )
    assert_ran_nothing(ran)
    skipped = deliver_comment(
        github,
        f'/bot skip --sha {SHA[:12]} --comment "docs"',
        author="maintainer",
        number=9,
        comment_id=2,
    )
    assert_ran_nothing(skipped)
    assert status_of(github, GROUND) is None
    for reply in our_replies(github, 9):
        assert "was not run" in reply.body, reply.body
        assert "has 12 of the 40 hex digits of a commit's SHA" in reply.body
        assert f"`--sha {GROUND}`" in reply.body  # the full head, ready to copy


@pytest.mark.parametrize("digits", [7, 12, 39])
def test_a_sha_prefix_is_refused_even_when_it_begins_the_head(github, digits) -> None:
    """Issues 28 and 43: any prefix can be ground to match a second commit (7 hex digits are
    2^28 tries, 12 a birthday search of 2^24 each over two commits the author makes)."""
    outcome = deliver_comment(
        github, f'/bot skip --sha {SHA[:digits]} --comment "docs"', author="maintainer"
    )
    assert_ran_nothing(outcome)
    assert pr_status(github) is None
    assert f"has {digits} of the 40 hex digits of a commit's SHA" in refusal(github)


def test_a_plain_push_after_the_comment_voids_it(github) -> None:
    """A push after the comment (the timeline's committed event) voids it even when the
    head is the commit the comment names."""
    body = f'/bot skip --sha {GROUND} --comment "docs"'
    github.add_comment(PR, body, "maintainer", 56)
    github.push(PR, GROUND)
    assert_ran_nothing(deliver_comment(github, body, author="maintainer", comment_id=56))
    assert "head moved after your comment (a push or a force-push" in refusal(github)
    assert status_of(github, GROUND) is None


def test_a_refusal_suggests_the_full_sha(github) -> None:
    github.push(PR, BAD)
    deliver_comment(github, '/bot skip --comment "docs"', author="maintainer")
    body = refusal(github)
    assert f"`--sha {BAD}`" in body and f"--sha {BAD[:7]})" not in body


def test_a_force_push_after_the_comment_voids_it(github) -> None:
    """A commit replaces the reviewed one by force after the comment: the timeline tells."""
    body = f'/bot skip --sha {GROUND} --comment "docs"'
    github.add_comment(PR, body, "maintainer", 55)
    github.push(PR, GROUND, force=True)
    assert_ran_nothing(deliver_comment(github, body, author="maintainer", comment_id=55))
    assert "head moved after your comment (a push or a force-push" in refusal(github)
    assert status_of(github, GROUND) is None


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("/bot skip --sha " + "c" * 41 + " --comment x", "has 41 digits; a commit's SHA has 40"),
        ("/bot skip --sha c0ffeeg --comment x", "is not hexadecimal"),
        ("/bot run --sha", "--sha needs the head commit's SHA"),
        ("/bot run --sha c0ffee0 --sha c0ffee0", "--sha is given twice"),
    ],
)
def test_bad_sha_prefixes_are_clear_errors(github, body, error) -> None:
    assert_ran_nothing(deliver_comment(github, body, author="maintainer"))
    (reply,) = our_replies(github)
    assert "Bot args parsing error!" in reply.body and error in reply.body


# ---------------------------------------------------------------- finding 5: the approval label


def gated(github: MemoryGitHub, comment_id: int, run_number: int, config=None):
    return deliver_comment(
        github,
        "/bot run --post-merge",
        author="writer",
        comment_id=comment_id,
        run_number=run_number,
        config=config,
    )


def test_a_label_added_by_a_triager_approves_nothing(github) -> None:
    assert_ran_nothing(gated(github, 1, 101))  # the bot records the head in its reply
    github.label(PR, "ci-approved", "triager")
    assert_ran_nothing(gated(github, 2, 102))
    assert "added by @triager, who is not a CI approver" in our_replies(github)[-1].body


def test_a_push_after_the_label_voids_it(github) -> None:
    assert_ran_nothing(gated(github, 1, 101))
    github.label(PR, "ci-approved", "maintainer")
    assert gated(github, 2, 102).run  # approved for SHA
    github.push(PR, BAD)
    assert_ran_nothing(gated(github, 3, 103))
    assert f"does not approve the head {BAD[:7]}" in our_replies(github)[-1].body
    github.label(PR, "ci-approved", "maintainer", remove=True)
    github.label(PR, "ci-approved", "maintainer")  # the approver reviewed BAD and re-approves
    assert gated(github, 4, 104).run


def test_a_label_added_before_the_bot_saw_the_head_approves_nothing(github) -> None:
    """A push right before the label (the approver reviewed the older head) is caught too:
    only a bot reply recording the head before the label ties the label to it."""
    github.label(PR, "ci-approved", "maintainer")
    assert_ran_nothing(gated(github, 1, 101))


def test_the_approvers_list_is_by_user_id(github) -> None:
    config = BotConfig(approvers=(user_id("triager"),))
    assert_ran_nothing(gated(github, 1, 101, config))
    github.label(PR, "ci-approved", "triager")
    assert gated(github, 2, 102, config).run


# ---------------------------------------------------------------- finding 6: rate limit


def test_one_commenter_gets_at_most_rate_limit_answers_per_hour(github) -> None:
    config = BotConfig(rate_limit=3)
    for i in range(5):
        outcome = deliver_comment(
            github,
            "/bot run",
            author="reader",
            comment_id=100 + i,
            run_number=101 + i,
            config=config,
        )
        assert_ran_nothing(outcome)
    assert len(our_replies(github)) == 3
    assert "reached the limit of 3" in outcome.reason
    deliver_comment(github, "/bot help", author="writer", comment_id=200, config=config)
    assert len(our_replies(github)) == 4  # others are not limited


def test_the_gate_refuses_a_rate_limited_commenter_with_one_read_and_no_app_token(
    gh, handle, tmp_path
) -> None:
    """Issue 28, finding 8: before the plan job mints the App's token, `bot gate` refuses what
    handle-event would: a comment not for the bot with no request, a commenter over the rate
    limit with one read of the comments."""
    config = tmp_path / "settings.yml"
    config.write_text("rate_limit: 2\n")
    args = ("--config", str(config))
    for i in range(2):
        handle("/bot run", author="reader", comment_id=100 + i, run_number=101 + i, args=args)
    assert len(replies(gh)) == 2
    before = len(gh.requests)
    gated = handle("/bot run", author="reader", comment_id=102, args=args, command="gate")
    assert gated.code == 0 and gated.outputs == {"proceed": "false"}
    assert "reached the limit of 2" in gated.out
    assert [r.route for r in gh.requests[before:]] == ["list_comments"]
    assert gh.calls("create_token") == []
    others = handle("/bot run", author="writer", comment_id=103, args=args, command="gate")
    assert others.outputs == {"proceed": "true"}
    quiet = len(gh.requests)
    ignored = handle("no command here", author="writer", comment_id=104, command="gate")
    assert ignored.outputs == {"proceed": "false"} and len(gh.requests) == quiet


# ---------------------------------------------------------------- finding 6: commands shown as code


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("Try this:\n\n    /bot skip --sha c0ffee0 --comment x", id="indented code"),
        pytest.param("\t/bot skip --sha c0ffee0 --comment x", id="tab-indented code"),
        pytest.param("<pre>\n/bot skip --sha c0ffee0 --comment x\n</pre>", id="pre block"),
        pytest.param("<PRE lang=sh>\n/bot skip --sha c0ffee0 --comment x\n</PRE>", id="PRE"),
        pytest.param("<code>\n/bot skip --sha c0ffee0 --comment x</code>", id="code element"),
    ],
)
def test_a_command_github_shows_as_code_does_nothing(github, body) -> None:
    outcome = deliver_comment(github, body, author="maintainer")
    assert "has no /bot line" in outcome.reason
    assert github.calls == [] and pr_status(github) is None


def test_a_command_after_a_closed_pre_block_counts(github) -> None:
    deliver_comment(github, "<pre>\nlog\n</pre>\n/bot help", author="reader")
    assert "## stagebot help" in our_replies(github)[0].body


def test_the_sha_travels_in_the_command_contract() -> None:
    from helpers.contracts import validate

    from stagebot.bot.comments.grammar import parse_comment
    from stagebot.stages.command import Command, render

    command = parse_comment(f'/bot skip --sha {SHA.upper()} --comment "docs"')
    data = command.to_json()
    validate("command", data)
    assert data["sha"] == SHA and Command.from_json(data) == command
    assert parse_comment(render(command)) == command
    assert "sha" not in parse_comment("/bot kill").to_json()
