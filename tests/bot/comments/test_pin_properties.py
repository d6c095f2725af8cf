"""The promises of SHA pinning and authorization, stated as properties (issue 50):

- a pin proves nothing unless every push to the PR since the reviewed commit is known: a
  ``--sha`` command applies only when its own comment is on the PR's timeline and no push or
  force-push follows that comment, whatever other comments, labels and pushes surround it;
- who may do what is a function of the repository role alone (and the user-id lists), never of
  who else commented: each command's required level, and only maintain or admin (or the
  approvers list) may approve a run of untrusted code with the label.

Through the comment handler over the in-memory GitHub (helpers.comment_rules), as a user would
meet them."""

from __future__ import annotations

import pytest
from github_server import user_id
from helpers.comment_rules import (
    PR,
    SHA,
    assert_ran_nothing,
    deliver_comment,
    our_replies,
    pull_request_world,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from stagebot.bot.comments.authz import authorize
from stagebot.bot.config import BotConfig
from stagebot.bot.github import Permission

REVIEWER_COMMENT = 4242
# What else happens on the PR's timeline: someone's comment, a push, a force-push, a label.
EVENTS = st.sampled_from(["comment", "push", "force-push", "label"])
ROLES = ("read", "triage", "write", "maintain", "admin")
LOGIN_OF_ROLE = {
    "read": "reader",
    "triage": "triager",
    "write": "writer",
    "maintain": "maintainer",
    "admin": "boss",
}


def play(github, events: list[str], first_sha: int) -> None:
    """Apply ``events`` to the PR; each push makes a new head."""
    for index, kind in enumerate(events):
        if kind == "comment":
            github.add_comment(PR, "looks fine to me", "reader")
        elif kind == "label":
            github.label(PR, "documentation", "triager")
        else:
            github.push(PR, f"{first_sha + index:040x}", force=kind == "force-push")


@settings(max_examples=150, deadline=None)
@given(
    before=st.lists(EVENTS, max_size=4),
    after=st.lists(EVENTS, max_size=4),
    on_timeline=st.booleans(),
)
def test_a_pin_holds_only_when_no_push_follows_its_comment(before, after, on_timeline) -> None:
    github = pull_request_world()
    play(github, before, 0x100)
    play(github, after, 0x200)
    head = github.pulls[PR].head_sha
    body = f'/bot skip --sha {head} --comment "reviewed"'
    # the reviewer's comment sits between ``before`` and ``after``: move it there
    github.add_comment(PR, body, "maintainer", comment_id=REVIEWER_COMMENT)
    timeline = github.events[PR]
    comment_event = timeline.pop()
    if on_timeline:
        timeline.insert(len(timeline) - len(after), comment_event)
    outcome = deliver_comment(github, body, author="maintainer", comment_id=REVIEWER_COMMENT)

    pushed_after = any(kind in ("push", "force-push") for kind in after)
    applied = github.latest_status(head, "stagebot")
    if on_timeline and not pushed_after:
        assert applied is not None and applied.state == "success"
    else:
        assert_ran_nothing(outcome)
        assert applied is None
        assert "head moved after your comment" in our_replies(github)[-1].body


def test_a_pin_whose_comment_is_not_on_the_timeline_is_refused() -> None:
    """GitHub's timeline lags or omits the comment: nothing proves no push came after it."""
    github = pull_request_world()
    body = f'/bot skip --sha {SHA} --comment "reviewed"'
    github.add_comment(PR, body, "maintainer", comment_id=REVIEWER_COMMENT)
    github.events[PR].clear()
    assert_ran_nothing(
        deliver_comment(github, body, author="maintainer", comment_id=REVIEWER_COMMENT)
    )
    assert github.latest_status(SHA, "stagebot") is None


def test_a_push_between_the_pins_comment_and_a_later_comment_voids_the_pin() -> None:
    """The pin is anchored to the command's own comment, not to the PR's latest comment."""
    github = pull_request_world()
    body = f'/bot skip --sha {SHA} --comment "reviewed"'
    github.add_comment(PR, body, "maintainer", comment_id=REVIEWER_COMMENT)
    github.push(PR, SHA)  # a push after the comment (even one that keeps the SHA)
    github.add_comment(PR, "ping", "reader")
    assert_ran_nothing(
        deliver_comment(github, body, author="maintainer", comment_id=REVIEWER_COMMENT)
    )


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(
    ("command", "needed"),
    [("help", None), ("run", "write"), ("kill", "write")]
    + [("skip", "maintain"), ("reuse-pipeline", "maintain")],
)
def test_each_command_needs_its_role(role, command, needed) -> None:
    decision = authorize(command, "someone", Permission(role, role), BotConfig(), user_id=7)
    allowed = needed is None or ROLES.index(role) >= ROLES.index(needed)
    assert decision.allowed == allowed, decision.why
    # the allowlist stands in for write, never for maintain
    listed = authorize(
        command, "someone", Permission(role, role), BotConfig(allowlist=(7,)), user_id=7
    )
    assert listed.allowed == (allowed or needed == "write"), listed.why


@pytest.mark.parametrize("role", ROLES)
def test_only_maintain_or_admin_approves_with_the_label(role) -> None:
    """A plan that needs approval (here: --post-merge) runs after the label only when its adder
    is a CI approver: maintain or admin (bot/comments/authz.py's table), write is not enough."""
    github = pull_request_world()

    def gated(comment_id: int, run_number: int):
        return deliver_comment(
            github,
            "/bot run --post-merge",
            author="writer",
            comment_id=comment_id,
            run_number=run_number,
        )

    assert_ran_nothing(gated(1, 101))  # the bot's reply records the head
    github.label(PR, "ci-approved", LOGIN_OF_ROLE[role])
    approved = gated(2, 102)
    assert approved.run == (role in ("maintain", "admin")), our_replies(github)[-1].body


def test_the_approvers_list_approves_whatever_the_role() -> None:
    github = pull_request_world()
    config = BotConfig(approvers=(user_id("reader"),))
    deliver_comment(github, "/bot run --post-merge", comment_id=1, run_number=101, config=config)
    github.label(PR, "ci-approved", "reader")
    ran = deliver_comment(
        github, "/bot run --post-merge", comment_id=2, run_number=102, config=config
    )
    assert ran.run
