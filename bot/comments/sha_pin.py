"""Whether a command applies to the commit its author reviewed (``--sha``)."""

from __future__ import annotations

from stagebot.bot.comments.authz import Decision
from stagebot.bot.comments.session import Session
from stagebot.bot.github import Permission, TimelineEvent
from stagebot.stages.command import Command
from stagebot.templates.markdown import escape

PULL_COMMITS_LISTED = 250  # GitHub lists at most this many commits of a pull request


def check_sha(session: Session, command: Command, permission: Permission) -> Decision:
    """The command applies only to the commit its author named (--sha, 12 to 40 hex digits):
    skip and reuse-pipeline always need it, run on PRs whose author lacks write permission. A
    prefix can be ground to match a second commit, so it must begin the head's SHA and no other
    listed commit of the PR, the head must be among the listed commits and the list complete
    (GitHub lists at most 250), and the timeline must show no push (``committed``) and no
    force-push after the comment (GitHub's order, no timestamps)."""
    pull, event, api = session.pull, session.event, session.api
    head, sha = pull.head_sha, command.sha
    again = f"review it and comment again with `--sha {head}`"
    if sha is None:
        if command.name in ("skip", "reuse-pipeline"):
            return Decision(
                False,
                f"`/bot {command.name}` needs --sha naming the commit you reviewed; the "
                f"PR's head is {head} (after reviewing it: `--sha {head}`)",
            )
        if command.name == "run":
            author = permission if pull.author == event.author else api.permission(pull.author)
            if not author.at_least("write"):
                return Decision(
                    False,
                    f"the PR's author @{escape(pull.author)} lacks write permission, "
                    f"so `/bot run` needs --sha naming the commit you reviewed; the head "
                    f"is {head} (after reviewing it: `--sha {head}`)",
                )
        return Decision(True, "no --sha needed")
    if not head.startswith(sha):
        return Decision(
            False,
            f"--sha {sha} is not the PR's head {head} (it moved since, or the SHA is "
            f"mistyped); {again}",
        )
    commits = api.pull_commits(pull.number)
    if len(commits) >= PULL_COMMITS_LISTED or head not in commits:
        return Decision(
            False,
            f"the PR's commit list is incomplete ({len(commits)} listed; GitHub lists at "
            f"most {PULL_COMMITS_LISTED}) or lacks the head {head}, so --sha {sha} cannot be "
            "checked against a commit ground to match it; give the full SHA of a PR with "
            "fewer commits (squash it)",
        )
    matching = [c for c in commits if c.startswith(sha)]
    if len(matching) > 1:
        return Decision(
            False,
            f"--sha {sha} is ambiguous: {len(matching)} commits of this PR begin with it "
            f"({', '.join(matching)}); give the full SHA `--sha {head}`",
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
            f"comment is not on its timeline), so --sha {sha} may name a commit made to "
            f"match it; the head is {head}: {again}",
        )
    return Decision(True, f"--sha {sha} is the head {head}")
