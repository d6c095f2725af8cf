"""The bot's replies: rendered from templates/reply_*.md.j2, each ending in the hidden marker.

The marker records the pipeline, the pinned commit and the triggering comment id, so the bot
finds its reply again (to edit it), handles each comment once, and recognises a write that
landed although GitHub answered with an error. Only comments written by the bot's own login
count: anyone can paste a marker-looking text into a comment.
"""

from __future__ import annotations

from dataclasses import dataclass

from stagebot.bot.github import Comment
from stagebot.bot.protocols.marker import (
    TAIL,
    MarkerError,
    ReplyMarker,
    find_ledger_digests,
    find_marker,
    render_ledger_digest,
)
from stagebot.harness.report.status_text import label
from stagebot.templates.markdown import Trusted, block, code, escape, url

NO_RUN_STATE = "ABORTED"  # a reply that started no pipeline: the marker schema has no "none"
# "@" before anything a login or team (org/team, with "_") can start with


@dataclass(frozen=True)
class Reply:
    comment: Comment
    marker: ReplyMarker


def our_replies(comments: list[Comment], bot_login: str) -> list[Reply]:
    """The bot's replies that carry a marker; a mangled marker is skipped, not fatal."""
    replies = []
    for comment in comments:
        if comment.author.lower() != bot_login.lower():
            continue
        try:
            marker = find_marker(comment.body)
        except MarkerError:
            continue
        if marker is not None:
            replies.append(Reply(comment, marker))
    return replies


def reply_to(replies: list[Reply], comment_id: int) -> Reply | None:
    """Our reply to the triggering comment ``comment_id``, if we already answered it."""
    return next((r for r in replies if r.marker.comment_id == comment_id), None)


def reply_for_pipeline(replies: list[Reply], pipeline: int) -> Reply | None:
    return next((r for r in replies if r.marker.pipeline == pipeline), None)


def running(replies: list[Reply], current: int) -> list[Reply]:
    """Replies whose pipelines are still marked RUNNING, other than ``current``."""
    return [r for r in replies if r.marker.state == "RUNNING" and r.marker.pipeline != current]


def ledger_digests(replies: list[Reply]) -> set[str]:
    """The ledger digests the bot recorded in its replies (only the bot login's comments)."""
    return set().union(*(find_ledger_digests(r.comment.body) for r in replies))


def next_pipeline(replies: list[Reply]) -> int:
    """Without GITHUB_RUN_NUMBER: one more than the highest pipeline the bot replied about."""
    return 1 + max((r.marker.pipeline for r in replies), default=0)


def render_reply(
    kind: str,
    marker: ReplyMarker,
    *,
    notice: str | None = None,
    ledger_digest: str | None = None,
    ledger_run: int | None = None,
    **context: object,
) -> str:
    """Render templates/reply_<kind>.md.j2 and append ``notice`` (escaped) and the marker. Pass
    user-controlled values raw: the templates escape each with ``md`` / ``code`` / ``block``."""
    from stagebot.templates import render_template

    body = render_template(
        f"reply_{kind}.md.j2", md=escape, code=code, block=block, url=url, label=_label, **context
    ).rstrip()
    if notice:
        body += f"\n\n⚠️ {escape(notice)}"
    return f"{body}\n\n{with_ledger_digest(marker.render(), ledger_digest, ledger_run)}\n"


def _label(number: int) -> Trusted:
    """A pipeline's label as the replies print it: the bot's own words (``#`` not escaped)."""
    return Trusted(label(number))


def with_ledger_digest(marker: str, digest: str | None, run_id: int | None = None) -> str:
    """The reply's hidden tail: the ledger digest line (when the bot saved a ledger, with the
    run that uploads it), then the marker, which is always last."""
    return f"{render_ledger_digest(digest, run_id)}\n{marker}" if digest else marker


def with_note(body: str, note: str) -> str:
    """One of the bot's replies with ``note`` (escaped) as its last visible paragraph; the hidden
    tail (the ledger digest line, then the marker) stays last, unchanged."""
    match = TAIL.search(body)
    if match is None:
        raise MarkerError("the reply has no marker at its end")
    return f"{body[: match.start()].rstrip()}\n\n⚠️ {escape(note)}\n\n{body[match.start() :]}"
