"""How many answered /bot comments one person may have on a PR per hour."""

from __future__ import annotations

from datetime import datetime, timedelta

from stagebot.bot.comments.events import CommentEvent
from stagebot.bot.comments.replies import Reply
from stagebot.bot.github import Comment


def rate_limited(
    event: CommentEvent, comments: list[Comment], replies: list[Reply], limit: int
) -> bool:
    """Whether the commenter already had ``limit`` /bot comments on this PR answered (one of
    ``replies`` names them) in the hour before this one (GitHub's timestamps; one reply and at
    most one pipeline per comment). Bounds the replies, API calls and pipelines one person can
    cause."""

    def when(stamp: str) -> datetime | None:
        try:
            return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return None

    now = when(event.created_at)
    if now is None:
        return False
    theirs = {c.id: when(c.created_at) for c in comments if c.author == event.author}
    answered = sum(
        1
        for reply in replies
        if (at := theirs.get(reply.marker.comment_id)) is not None
        and now - timedelta(hours=1) <= at <= now
    )
    return answered >= limit
