"""Drive the comment handler directly, over the in-memory GitHub: the one place rule tests build a
``CommentHandler`` (``deliver_comment``), so a change to how it is made is adapted here only; and
the pull request the rule tests comment on (``pull_request_world``), with what they look at."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from github_server import user_id

from helpers.fake_pr import BOT, COMMENT_ID, PR, ROLES, SHA
from helpers.memory_github import MemoryGitHub
from stagebot.bot.comments.events import CommentEvent
from stagebot.bot.comments.on_comment import CommentHandler, Outcome
from stagebot.bot.config import BotConfig
from stagebot.bot.github import ActionsEnv, Comment, Status
from stagebot.bot.protocols.marker import find_marker


def pull_request_world() -> MemoryGitHub:
    """PR #7 at ``SHA`` and the people of ``ROLES``, plus one with a custom role."""
    world = MemoryGitHub()
    world.add_pull(PR, head_sha=SHA, files=("bot/comments/grammar.py",))
    for login, role in ROLES:
        world.grant(login, role)
    world.permissions["custom"] = ("write", "release-manager")
    return world


def our_replies(github: MemoryGitHub, number: int = PR) -> list[Comment]:
    return github.bot_comments(number, BOT)


def reply_to_comment(github: MemoryGitHub, comment_id: int = COMMENT_ID) -> Comment:
    (reply,) = [c for c in our_replies(github) if find_marker(c.body).comment_id == comment_id]
    return reply


def pr_status(github: MemoryGitHub) -> Status | None:
    return github.latest_status(SHA, "stagebot")


def assert_ran_nothing(outcome: Outcome) -> None:
    assert not outcome.run and outcome.matrix == []


def deliver_comment(
    github: MemoryGitHub,
    body: str = "/bot run",
    *,
    author: str = "writer",
    comment_id: int = COMMENT_ID,
    number: int = PR,
    run_number: int | None = 101,
    run_attempt: int = 1,
    config: BotConfig | None = None,
    ledger: Path | None = None,
    **event: Any,
) -> Outcome:
    """What `bot handle-event` does with an ``issue_comment`` event, minus the CLI: the comment is
    on the PR (added when absent), the handler runs with the Actions run ``run_number`` (run id
    50000 + run_number) and the ledger file ``ledger``. ``event`` overrides the event's other
    fields (``action``, ``author_type``, ``is_pull_request``, ``created_at``)."""
    if comment_id not in github.issue_comments:
        github.add_comment(number, body, author, comment_id=comment_id)
    comment = CommentEvent(
        action="created",
        comment_id=comment_id,
        body=body,
        author=author,
        author_type="User",
        number=number,
        is_pull_request=True,
        html_url=f"{github.base}/{github.repo}/pull/{number}#issuecomment-{comment_id}",
        author_id=user_id(author),
        created_at="2026-01-01T00:00:00Z",
    )
    env = ActionsEnv(
        repository=github.repo,
        event_name="issue_comment",
        event_path="(in memory)",
        server_url=github.base,
        run_id=50000 + (run_number or 0),
        run_number=run_number,
        run_attempt=run_attempt,
    )
    handler = CommentHandler(
        env,
        config or BotConfig(),
        replace(comment, **event),
        connect=lambda: github,
        ledger_path=ledger,
    )
    return handler.handle()
