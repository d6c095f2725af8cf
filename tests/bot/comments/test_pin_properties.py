"""The promises of SHA pinning and authorization, stated as properties (issue 50):

- a pin proves nothing unless every push to the PR since the reviewed commit is known: a
  ``--sha`` command applies only when its own comment is on the PR's timeline and no push or
  force-push follows that comment, whatever other comments, labels and pushes surround it;
- who may do what is a function of the repository role alone (and the user-id lists), never of
  who else commented: each command's required level, and only maintain or admin (or the
  approvers list) may approve a run of untrusted code with the label;
- the label approves the head only when its newest ``labeled`` event is an approver's, after a
  bot reply that recorded the head, with no force-push between that reply and now.

Through the comment handler over the in-memory GitHub (helpers.comment_rules), as a user would
meet them."""

from __future__ import annotations

import dataclasses
import json

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
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stagebot.bot.comments.authz import approve, authorize
from stagebot.bot.config import BotConfig
from stagebot.bot.github import Permission, TimelineEvent

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
    # the reviewer comments between ``before`` and ``after`` (comment ids grow with time)
    comment_id = github.add_comment(PR, "(the command)", "maintainer").id
    if not on_timeline:  # GitHub's timeline lags or leaves it out
        github.events[PR].pop()
    play(github, after, 0x200)
    head = github.pulls[PR].head_sha
    github.events[PR] = [as_parsed(event) for event in github.events[PR]]  # as JSON gives them
    body = f'/bot skip --sha {head} --comment "reviewed"'
    outcome = deliver_comment(github, body, author="maintainer", comment_id=comment_id)

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
    if not allowed:  # the refusal names what is needed and what the commenter has
        what = "write permission" if needed == "write" else "maintain or admin permission"
        assert f"`/bot {command}` needs {what}" in decision.why
        assert decision.why.endswith(f"@someone has {role}")
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


HEAD = "a" * 40
LABEL = BotConfig().approval_label
# the timeline's events: a bot reply recording the head (or another commit), someone's comment,
# the approval label added (by an approver or not) or removed, another label, a force-push
TIMELINE_EVENTS = st.sampled_from(
    ["reply head", "reply other", "comment", "label approver", "label other", "unlabel"]
    + ["other label", "force-push"]
)


def as_parsed(event: TimelineEvent) -> TimelineEvent:
    """``event`` as GitHub's JSON gives it: its strings are new objects, not the interned
    literals of this file (an ``is`` where ``==`` belongs would pass on literals alone)."""
    return TimelineEvent(**json.loads(json.dumps(dataclasses.asdict(event))))


def timeline_of(kinds: list[str]) -> tuple[list[TimelineEvent], dict[int, str]]:
    events, replies = [], {}
    for index, kind in enumerate(kinds):
        if kind.startswith("reply"):
            replies[index] = HEAD if kind == "reply head" else "b" * 40
            events.append(TimelineEvent("commented", "bot", 1, comment_id=index))
        elif kind == "comment":
            events.append(TimelineEvent("commented", "reader", 2, comment_id=index))
        elif kind in ("label approver", "label other"):
            who = "boss" if kind == "label approver" else "writer"
            events.append(TimelineEvent("labeled", who, 3, label=LABEL))
        elif kind == "unlabel":
            events.append(TimelineEvent("unlabeled", "boss", 3, label=LABEL))
        elif kind == "other label":
            events.append(TimelineEvent("labeled", "writer", 4, label="documentation"))
        else:
            events.append(TimelineEvent("head_ref_force_pushed", "writer", 4))
    return [as_parsed(event) for event in events], replies


def approves(kinds: list[str]) -> bool:
    """The rule, stated plainly over the timeline."""
    marks = [i for i, k in enumerate(kinds) if k in ("label approver", "label other", "unlabel")]
    if not marks or kinds[marks[-1]] != "label approver":
        return False
    added = marks[-1]
    if "force-push" in kinds[added:]:
        return False
    return any(
        kind == "reply head" and "force-push" not in kinds[index:added]
        for index, kind in enumerate(kinds[:added])
    )


@settings(max_examples=300, deadline=None)
@given(kinds=st.lists(TIMELINE_EVENTS, max_size=8), labelled=st.booleans())
# the orders that decide, beside what hypothesis draws
@example(kinds=["reply head", "label approver"], labelled=True)
@example(kinds=["reply head", "label approver", "force-push"], labelled=True)
@example(kinds=["reply head", "force-push", "label approver"], labelled=True)
@example(kinds=["label approver", "reply head"], labelled=True)
@example(kinds=["reply head", "label approver", "unlabel"], labelled=True)
@example(kinds=["reply head", "label approver", "label other"], labelled=True)
@example(kinds=["reply other", "label approver"], labelled=True)
def test_the_label_approves_the_head_only_when_an_approver_added_it_on_that_head(kinds, labelled):
    events, replies = timeline_of(kinds)
    decision = approve(
        True,
        ["it asks for --post-merge"],
        (LABEL,) if labelled else (),
        BotConfig(),
        head=HEAD,
        timeline=lambda: events,
        is_approver=lambda event: event.actor == "boss",
        reply_commits=replies,
    )
    assert decision.allowed == (labelled and approves(kinds)), decision.why
    marks = [kind for kind in kinds if kind in ("label approver", "label other", "unlabel")]
    if decision.allowed:
        assert decision.why == f"@boss added the {LABEL!r} label on {HEAD[:7]}"
    elif labelled and marks and marks[-1] == "label approver":  # an approver's, at a wrong time
        assert f"does not approve the head {HEAD[:7]}: " in decision.why
        assert f"must review {HEAD[:7]}, then remove" in decision.why
    assert approve(False, [], (), BotConfig(), head=HEAD).allowed


AUTHORS = ("outsider", "reader", "triager", "writer", "maintainer", "boss")
COMMENTERS = ("writer", "maintainer", "boss")


@pytest.mark.parametrize("author", AUTHORS)
@pytest.mark.parametrize("commenter", COMMENTERS)
def test_a_run_without_sha_needs_a_pr_author_with_write(author, commenter) -> None:
    """Whoever comments, the PR author's own permission decides (not the commenter's)."""
    github = pull_request_world()
    github.add_pull(9, head_sha="f" * 40, author=author, fork=True)
    outcome = deliver_comment(github, "/bot run", author=commenter, number=9, comment_id=1)
    author_writes = author in ("writer", "maintainer", "boss")
    assert outcome.run == author_writes, our_replies(github, 9)[-1].body
    if not author_writes:
        assert "lacks write permission, so `/bot run` needs --sha" in our_replies(github, 9)[0].body


@pytest.mark.parametrize("body", ["/bot kill", "/bot help"])
def test_kill_and_help_need_no_sha_on_any_pr(body) -> None:
    github = pull_request_world()
    github.add_pull(9, head_sha="f" * 40, author="outsider", fork=True)
    deliver_comment(github, body, author="writer", number=9, comment_id=1)
    (reply,) = our_replies(github, 9)
    assert "was not run" not in reply.body and "needs --sha" not in reply.body, reply.body


@pytest.mark.parametrize("named", ["0" * 40, "e" * 40])  # below and above the head c0ffee…
def test_a_sha_that_is_not_the_head_is_refused(named) -> None:
    github = pull_request_world()
    outcome = deliver_comment(github, f'/bot skip --sha {named} --comment "x"', author="maintainer")
    assert_ran_nothing(outcome)
    assert github.latest_status(SHA, "stagebot") is None
    assert f"--sha {named} is not the PR's head {SHA}" in our_replies(github)[-1].body
