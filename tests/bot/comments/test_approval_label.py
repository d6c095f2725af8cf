"""The approval label is one label, named exactly, and nobody approves unless the caller says
who may (issue 50): ``approve`` over timelines where other labels, before and after the approval
label's name in sort order, come and go."""

from __future__ import annotations

import pytest

from stagebot.bot.comments.authz import approve
from stagebot.bot.config import BotConfig
from stagebot.bot.github import TimelineEvent

HEAD = "a" * 40
LABEL = BotConfig().approval_label  # "ci-approved"


def decide(events: list[TimelineEvent], **given) -> bool:
    return approve(
        True,
        ["it asks for --post-merge"],
        (LABEL,),
        BotConfig(),
        head=HEAD,
        timeline=lambda: events,
        reply_commits={1: HEAD},
        **given,
    ).allowed


REPLY = TimelineEvent("commented", "bot", 1, comment_id=1)
APPROVED = TimelineEvent("labeled", "boss", 3, label=LABEL)


@pytest.mark.parametrize("other", ["bug", "ci", "ci-approved-later", "documentation", "zz"])
@pytest.mark.parametrize("kind", ["labeled", "unlabeled"])
def test_another_label_neither_approves_nor_withdraws_the_approval(other, kind) -> None:
    is_approver = {"is_approver": lambda event: event.actor == "boss"}
    assert decide([REPLY, APPROVED, TimelineEvent(kind, "writer", 4, label=other)], **is_approver)
    assert not decide([REPLY, TimelineEvent("labeled", "boss", 3, label=other)], **is_approver)


def test_without_a_judge_of_approvers_nobody_approves() -> None:
    assert not decide([REPLY, APPROVED])
