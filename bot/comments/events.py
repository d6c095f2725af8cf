"""The webhook events the bot reads, as plain data, and which of them it acts on.

Only an ``issue_comment`` ``created`` on a pull request, written by a person, whose body has a
`/bot` line is acted on; everything else is a no-op with a one-line reason and no writes (like
Prow's generic-comment handler: edits, deletions, issues and bots never trigger anything).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stagebot.bot.comments.grammar import find_command_line
from stagebot.stages.errors import CommandError, StagebotError


class EventError(StagebotError):
    """A webhook payload that is not what its event name says."""


@dataclass(frozen=True)
class CommentEvent:
    action: str  # created | edited | deleted
    comment_id: int
    body: str
    author: str
    author_type: str  # "User" | "Bot" | "Organization"
    number: int  # the issue or pull request
    is_pull_request: bool
    html_url: str
    author_id: int | None = None  # the commenter's user id (the allowlist matches ids)
    created_at: str = ""  # GitHub's time of the comment (ISO 8601)


@dataclass(frozen=True)
class PushEvent:
    ref: str
    sha: str
    default_branch: str

    @property
    def on_default_branch(self) -> bool:
        return self.ref == f"refs/heads/{self.default_branch}"


def load_payload(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EventError(f"{path}: no such event payload file (GITHUB_EVENT_PATH)") from None
    except json.JSONDecodeError as error:
        raise EventError(f"{path}: the event payload is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise EventError(f"{path}: the event payload is not a JSON object")
    return data


def comment_event(payload: dict[str, Any]) -> CommentEvent:
    """Read an ``issue_comment`` payload (GitHub's documented shape)."""
    try:
        comment, issue = payload["comment"], payload["issue"]
        user = comment.get("user") or {}
        return CommentEvent(
            action=str(payload["action"]),
            comment_id=int(comment["id"]),
            body=comment.get("body") or "",
            author=user.get("login") or "ghost",
            author_type=user.get("type") or "User",
            number=int(issue["number"]),
            is_pull_request=bool(issue.get("pull_request")),
            html_url=comment.get("html_url") or "",
            author_id=int(user["id"]) if isinstance(user.get("id"), int) else None,
            created_at=str(comment.get("created_at") or ""),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise EventError(
            f"the issue_comment payload lacks or mistypes {error}; expected GitHub's shape "
            "(action, issue.number, comment.id/body/user)"
        ) from None


def push_event(payload: dict[str, Any]) -> PushEvent:
    try:
        return PushEvent(
            ref=str(payload["ref"]),
            sha=str(payload["after"]),
            default_branch=str(payload["repository"]["default_branch"]),
        )
    except (KeyError, TypeError) as error:
        raise EventError(
            f"the push payload lacks {error}; expected ref, after, repository"
        ) from None


def ignore_reason(event: CommentEvent, bot_login: str) -> str | None:
    """Why this comment is not for the bot, or None when the bot acts on it."""
    if event.action != "created":
        return f"comment {event.comment_id} was {event.action}; only new comments are acted on"
    if not event.is_pull_request:
        return f"#{event.number} is an issue, not a pull request"
    if (
        event.author_type == "Bot"
        or event.author.endswith("[bot]")
        or event.author.lower() == bot_login.lower()
    ):
        return f"comment {event.comment_id} is by a bot ({event.author})"
    try:
        if find_command_line(event.body) is None:
            return f"comment {event.comment_id} has no /bot line"
    except CommandError:
        return None  # several /bot lines: malformed, answered as such
    return None


def default_branch(event_path: str | None, fallback: str = "main") -> str:
    """The repository's default branch from the event payload (``repository.default_branch``,
    in issue_comment and push payloads alike); ``fallback`` without a readable payload."""
    if not event_path:
        return fallback
    try:
        branch = (load_payload(event_path).get("repository") or {}).get("default_branch")
    except (EventError, OSError, AttributeError):
        return fallback
    return branch if isinstance(branch, str) and branch else fallback
