"""Attack tests (issue 13, findings 1, 5 and 6): a command applies only to the commit its author
named, the approval label only when an approver added it on the head, and one commenter cannot
flood the bot. `bot handle-event` through the CLI, real PyGithub against the fake GitHub."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import pytest
from helpers.fake_pr import PR, SHA, replies, status
from helpers.handle_event import assert_nothing_ran, gh, handle

BAD = "bad0" + "1" * 36  # what the PR's author pushes after the review
GROUND = SHA[:12] + "f" * 28  # a commit ground to share the reviewed commit's 12-digit prefix


def refusal(gh) -> str:
    (reply,) = replies(gh)
    assert "was not run" in reply["body"], reply["body"]
    return reply["body"]


# ---------------------------------------------------------------- finding 1: --sha


def test_skip_without_sha_is_refused_and_names_the_head(gh, handle) -> None:
    gh.push(PR, BAD)  # the author pushes right after the maintainer's review
    result = handle('/bot skip --comment "reviewed"', author="maintainer")
    assert_nothing_ran(result)
    assert status(gh) is None and gh.latest_status(BAD, "stagebot") is None
    assert f"needs --sha naming the commit you reviewed; the PR's head is {BAD}" in refusal(gh)


@pytest.mark.parametrize(
    "command", ['/bot skip --sha {sha} --comment "docs"', "/bot reuse-pipeline --sha {sha}"]
)
def test_a_push_after_the_review_voids_a_dangerous_command(gh, handle, command) -> None:
    gh.push(PR, BAD)
    result = handle(command.format(sha=SHA[:12]), author="maintainer")
    assert_nothing_ran(result)
    assert gh.latest_status(BAD, "stagebot") is None and status(gh) is None
    body = refusal(gh)
    assert f"--sha {SHA[:12]} is not the PR's head {BAD}" in body  # both SHAs
    assert "comment the command again with its SHA" in body


def test_skip_with_the_heads_sha_applies_to_that_commit(gh, handle) -> None:
    result = handle(f'/bot skip --sha {SHA[:12].upper()} --comment "docs"', author="maintainer")
    assert result.code == 0 and status(gh)["state"] == "success"


def test_run_on_a_non_writers_pr_needs_the_sha(gh, handle) -> None:
    gh.add_pull(9, head_sha="f" * 40, author="outsider", fork=True)
    refused = handle("/bot run", author="writer", number=9, comment_id=1)
    assert_nothing_ran(refused)
    assert "lacks write permission, so `/bot run` needs --sha" in gh.bot_comments(9)[0]["body"]
    gh.push(9, BAD)  # the fork's author pushes after the writer reviewed fffffff
    moved = handle("/bot run --sha ffffffffffff", author="writer", number=9, comment_id=2)
    assert_nothing_ran(moved)
    accepted = handle(
        f"/bot run --sha {BAD[:12]}", author="writer", number=9, comment_id=3, run_number=102
    )
    assert accepted.outputs["run"] == "true" and accepted.outputs["commit"] == BAD
    reply = gh.bot_comments(9)[-1]["body"]
    assert f"Testing commit `{BAD}`" in reply  # the triggered reply names the full SHA


def test_a_prefix_ground_to_match_a_pushed_commit_is_ambiguous(gh, handle) -> None:
    gh.push(PR, GROUND)
    result = handle(f'/bot skip --sha {SHA[:12]} --comment "docs"', author="maintainer")
    assert_nothing_ran(result)
    assert f"is ambiguous: 2 commits of this PR begin with it ({SHA}, {GROUND})" in refusal(gh)
    assert gh.latest_status(GROUND, "stagebot") is None


@pytest.mark.parametrize("digits", [7, 11])
def test_a_grindable_sha_prefix_is_refused(gh, handle, digits) -> None:
    """Issue 28, finding 1: 7 hex digits are 2^28 tries to grind; at least 12 are needed."""
    result = handle(f'/bot skip --sha {SHA[:digits]} --comment "docs"', author="maintainer")
    assert_nothing_ran(result)
    assert status(gh) is None
    (reply,) = replies(gh)
    assert f"has {digits} digits; give 12 to 40 hex digits" in reply["body"]


def test_a_ground_commit_beyond_the_250_listed_commits_is_refused(gh, handle) -> None:
    """GitHub lists at most 250 commits of a PR: a ground commit pushed after the reviewed one
    on a long PR is not in the list, so the list cannot prove the prefix unique."""
    filler = [f"{i:040x}" for i in range(1, 260)]
    gh.commits[PR] = [*filler, SHA]
    gh.pulls[PR]["head"]["sha"] = SHA
    gh.push(PR, GROUND)  # a plain push on top: the 261st commit
    result = handle(f'/bot skip --sha {SHA[:12]} --comment "docs"', author="maintainer")
    assert_nothing_ran(result)
    assert gh.latest_status(GROUND, "stagebot") is None
    assert "the PR's commit list is incomplete (250 listed" in refusal(gh)


def test_a_plain_push_after_the_comment_voids_it(gh, handle) -> None:
    """A push after the comment (the timeline's committed event) voids it even when the
    head still matches: here the ground commit is alone in the list (the reviewed one
    was dropped from it), so only the timeline tells."""
    gh.add_comment(PR, f'/bot skip --sha {SHA[:12]} --comment "docs"', "maintainer", 56)
    gh.push(PR, GROUND)
    gh.commits[PR] = [GROUND]
    result = handle(
        f'/bot skip --sha {SHA[:12]} --comment "docs"', author="maintainer", comment_id=56
    )
    assert_nothing_ran(result)
    assert "head moved after your comment (a push or a force-push" in refusal(gh)
    assert gh.latest_status(GROUND, "stagebot") is None


def test_a_refusal_suggests_the_full_sha(gh, handle) -> None:
    gh.push(PR, BAD)
    handle('/bot skip --comment "docs"', author="maintainer")
    body = refusal(gh)
    assert f"`--sha {BAD}`" in body and f"--sha {BAD[:7]})" not in body


def test_a_force_push_after_the_comment_voids_it(gh, handle) -> None:
    """The ground commit replaces the reviewed one by force: only the timeline tells."""
    gh.add_comment(PR, f'/bot skip --sha {SHA[:12]} --comment "docs"', "maintainer", 55)
    gh.push(PR, GROUND, force=True)
    result = handle(
        f'/bot skip --sha {SHA[:12]} --comment "docs"', author="maintainer", comment_id=55
    )
    assert_nothing_ran(result)
    assert "head moved after your comment (a push or a force-push" in refusal(gh)
    assert gh.latest_status(GROUND, "stagebot") is None


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("/bot skip --sha c0ffe --comment x", "has 5 digits; give 12 to 40 hex digits"),
        ("/bot skip --sha c0ffeeg --comment x", "is not hexadecimal"),
        ("/bot run --sha", "--sha needs the head commit's SHA"),
        ("/bot run --sha c0ffee0 --sha c0ffee0", "--sha is given twice"),
    ],
)
def test_bad_sha_prefixes_are_clear_errors(gh, handle, body, error) -> None:
    assert_nothing_ran(handle(body, author="maintainer"))
    (reply,) = replies(gh)
    assert "Bot args parsing error!" in reply["body"] and error in reply["body"]


# ---------------------------------------------------------------- finding 5: the approval label


def gated(handle, comment_id: int, run_number: int):
    return handle(
        "/bot run --post-merge", author="writer", comment_id=comment_id, run_number=run_number
    )


def test_a_label_added_by_a_triager_approves_nothing(gh, handle) -> None:
    assert_nothing_ran(gated(handle, 1, 101))  # the bot records the head in its reply
    gh.label(PR, "ci-approved", "triager")
    assert_nothing_ran(gated(handle, 2, 102))
    assert "added by @triager, who is not a CI approver" in replies(gh)[-1]["body"]


def test_a_push_after_the_label_voids_it(gh, handle) -> None:
    assert_nothing_ran(gated(handle, 1, 101))
    gh.label(PR, "ci-approved", "maintainer")
    assert gated(handle, 2, 102).outputs["run"] == "true"  # approved for SHA
    gh.push(PR, BAD)
    assert_nothing_ran(gated(handle, 3, 103))
    assert f"does not approve the head {BAD[:7]}" in replies(gh)[-1]["body"]
    gh.label(PR, "ci-approved", "maintainer", remove=True)
    gh.label(PR, "ci-approved", "maintainer")  # the approver reviewed BAD and re-approves
    assert gated(handle, 4, 104).outputs["run"] == "true"


def test_a_label_added_before_the_bot_saw_the_head_approves_nothing(gh, handle) -> None:
    """A push right before the label (the approver reviewed the older head) is caught too:
    only a bot reply recording the head before the label ties the label to it."""
    gh.label(PR, "ci-approved", "maintainer")
    assert_nothing_ran(gated(handle, 1, 101))


def test_the_approvers_list_is_by_user_id(gh, handle, tmp_path) -> None:
    from github_server import user_id

    config = tmp_path / "settings.yml"
    config.write_text(f"approvers: [{{login: triager, id: {user_id('triager')}}}]\n")
    args = ("--config", str(config))
    assert_nothing_ran(handle("/bot run --post-merge", author="writer", comment_id=1, args=args))
    gh.label(PR, "ci-approved", "triager")
    accepted = handle(
        "/bot run --post-merge", author="writer", comment_id=2, run_number=102, args=args
    )
    assert accepted.outputs["run"] == "true"


# ---------------------------------------------------------------- finding 6: rate limit


def test_one_commenter_gets_at_most_rate_limit_answers_per_hour(gh, handle, tmp_path) -> None:
    config = tmp_path / "settings.yml"
    config.write_text("rate_limit: 3\n")
    for i in range(5):
        result = handle("/bot run", author="reader", comment_id=100 + i, run_number=101 + i,
                        args=("--config", str(config)))  # fmt: skip
        assert_nothing_ran(result)
    assert len(replies(gh)) == 3
    assert "reached the limit of 3" in result.out
    other = handle("/bot help", author="writer", comment_id=200, args=("--config", str(config)))
    assert other.code == 0 and len(replies(gh)) == 4  # others are not limited


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
def test_a_command_github_shows_as_code_does_nothing(gh, handle, body) -> None:
    result = handle(body, author="maintainer")
    assert result.code == 0 and "has no /bot line" in result.out
    assert gh.requests == [] and status(gh) is None


def test_a_command_after_a_closed_pre_block_counts(gh, handle) -> None:
    result = handle("<pre>\nlog\n</pre>\n/bot help", author="reader")
    assert result.code == 0 and "## stagebot help" in replies(gh)[0]["body"]


def test_the_sha_travels_in_the_command_contract() -> None:
    from helpers.contracts import validate

    from stagebot.bot.grammar import parse_comment
    from stagebot.stages.command import Command, render

    command = parse_comment(f'/bot skip --sha {SHA[:12].upper()} --comment "docs"')
    data = command.to_json()
    validate("command", data)
    assert data["sha"] == SHA[:12] and Command.from_json(data) == command
    assert parse_comment(render(command)) == command
    assert "sha" not in parse_comment("/bot kill").to_json()
