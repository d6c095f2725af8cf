"""Whether a command applies to the commit its author reviewed (``--sha``)."""

from __future__ import annotations

from stagebot.bot.comments.authz import Decision
from stagebot.bot.comments.session import Session
from stagebot.bot.github import Permission, TimelineEvent
from stagebot.stages.command import Command
from stagebot.templates.markdown import escape

SHA_DIGITS = 40  # a full SHA-1: only it names one commit beyond any grinding


def check_sha(session: Session, command: Command, permission: Permission) -> Decision:
    """The command applies only to the commit its author named (--sha, the full 40-hex SHA):
    skip and reuse-pipeline always need it, run on PRs whose author lacks write permission.
    A shorter prefix is refused: the author can grind a second commit to share it and push it
    before the comment (the reviewed commit then leaves the PR's commit list, and GitHub shows
    no history of every commit ever pushed to prove the prefix unique), while the full SHA names
    one commit. The timeline must also show no push (``committed``) and no force-push after the
    comment (GitHub's order, no timestamps)."""
    pull, event, api = session.pull, session.event, session.api
    head, sha = pull.head_sha, command.sha
    again = f"review it and comment again with `--sha {head}`"
    if sha is None:
        if command.name in ("skip", "reuse-pipeline"):
            return Decision(
                False,
                f"`/bot {command.name}` needs --sha naming the commit you reviewed; the "
                f"PR's head is `{head}` (after reviewing it: `--sha {head}`)",
            )
        if command.name == "run":
            author = permission if pull.author == event.author else api.permission(pull.author)
            if not author.at_least("write"):
                return Decision(
                    False,
                    f"the PR's author @{escape(pull.author)} lacks write permission, "
                    f"so `/bot run` needs --sha naming the commit you reviewed; the head "
                    f"is `{head}` (after reviewing it: `--sha {head}`)",
                )
        return Decision(True, "no --sha needed")
    if len(sha) != SHA_DIGITS:
        return Decision(
            False,
            f"--sha {sha} has {len(sha)} of the {SHA_DIGITS} hex digits of a commit's SHA: a "
            "shorter prefix can be shared by a second commit made to match it, so only the "
            f"full SHA names the commit you reviewed; the PR's head is `{head}`: if that is the "
            f"commit you reviewed, comment again with `--sha {head}`",
        )
    if sha != head:
        return Decision(
            False,
            f"--sha {sha} is not the PR's head {head} (it moved since, or the SHA is "
            f"mistyped); {again}",
        )
    since: list[TimelineEvent] | None = None  # the timeline after the comment
    timeline = session.timeline
    for index, item in enumerate(timeline):
        if item.kind == "commented" and item.comment_id == event.comment_id:
            since = timeline[index + 1 :]
    moved = [e for e in since or [] if e.kind in ("committed", "head_ref_force_pushed")]
    if since is None or moved:
        return Decision(
            False,
            f"the PR's head moved after your comment (a push or a force-push; or the "
            f"comment is not on its timeline), so --sha {sha} may not be the commit you "
            f"reviewed; the head is {head}: {again}",
        )
    return Decision(True, f"--sha {sha} is the head")
