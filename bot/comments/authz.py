"""Who may do what: repository permission (role_name first), the allowlist, the approval label.

| command | needs |
|---|---|
| help | anyone |
| run, kill | write or higher, or a user id in the allowlist |
| skip, reuse-pipeline | maintain or admin |
| a run whose plan needs approval | also the approval label on the PR, added by a CI approver |
|  | (maintain or admin, or a user id in ``approvers``) after the PR's last push |

A fork PR's author is treated like anyone else: by permission.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from stagebot.bot.config import BotConfig
from stagebot.bot.github import Permission, TimelineEvent
from stagebot.templates.markdown import escape

REQUIRED_LEVEL = {"help": None, "run": "write", "kill": "write", "skip": "maintain"}
REQUIRED_LEVEL["reuse-pipeline"] = "maintain"
ALLOWLIST_GRANTS = "write"  # the allowlist stands in for write, never for maintain


@dataclass(frozen=True)
class Decision:
    allowed: bool
    # what allowed it, or what is missing: markdown said to the user (a reply puts it in as
    # is), so every user-controlled part in it is escaped here
    why: str


def authorize(
    command: str, login: str, permission: Permission, config: BotConfig, user_id: int | None = None
) -> Decision:
    needed = REQUIRED_LEVEL[command]
    if needed is None:
        return Decision(True, "anyone may ask for help")
    if permission.at_least(needed):
        return Decision(True, f"@{login} has {permission.level} permission")
    if needed == ALLOWLIST_GRANTS and config.allowlisted(user_id):
        return Decision(True, f"@{login} is in the allowlist of {config.source}")
    has = permission.level
    if needed == "write":
        return Decision(
            False,
            f"`/bot {command}` needs write permission on the repository (or a user in the "
            f"bot's allowlist); @{login} has {has}",
        )
    return Decision(
        False, f"`/bot {command}` needs maintain or admin permission; @{login} has {has}"
    )


def approve(
    needs_approval: bool,
    reasons: list[str],
    labels: tuple[str, ...],
    config: BotConfig,
    head: str = "",
    timeline: Callable[[], list[TimelineEvent]] = list,
    is_approver: Callable[[TimelineEvent], bool] = lambda event: False,
    reply_commits: Mapping[int, str] | None = None,
) -> Decision:
    """A plan that needs approval runs only with the approval label on the PR, and only when
    the label approved the head commit: the timeline's last ``labeled`` event for it (none
    ``unlabeled`` since) is a CI approver's, and came after one of the bot's replies that
    recorded this head (``reply_commits``: reply comment id -> its marker's commit), with no
    force-push since that reply. A normal push only moves the head to a new commit, so the head
    was the same commit when the label was added; timestamps (commit dates) play no part, only
    GitHub's order of the timeline. ``timeline`` is read only when the label is there."""
    if not needs_approval:
        return Decision(True, "the plan needs no approval")
    label = config.approval_label
    why = "; ".join(escape(reason) for reason in reasons)
    if label not in labels:
        return Decision(
            False,
            f"this plan needs the {label!r} label on the PR, which a CI approver applies ({why})",
        )
    commits = reply_commits or {}
    added: TimelineEvent | None = None
    seen_head = False  # a bot reply recorded the head, with no force-push since
    approved = False  # ... before the label was added
    for event in timeline():
        if event.kind in ("labeled", "unlabeled") and event.label == label:
            added = event if event.kind == "labeled" else None
            approved = seen_head and added is not None
        elif event.kind == "commented" and commits.get(event.comment_id or 0) == head:
            seen_head = True
        elif event.kind == "head_ref_force_pushed":
            seen_head = approved = False
    if added is None:
        return Decision(False, f"the {label!r} label has no labeled event on the PR's timeline")
    who = f"@{escape(added.actor or 'ghost')}"
    if not is_approver(added):
        return Decision(
            False,
            f"the {label!r} label was added by {who}, who is not a CI approver (maintain or "
            f"admin permission, or the approvers list); an approver must add it ({why})",
        )
    if not approved:
        return Decision(
            False,
            f"the {label!r} label, added by {who}, does not approve the head {head[:7]}: the "
            "PR got new commits (or a force-push) after it, or the bot had not yet recorded "
            f"this head when it was added; an approver must review {head[:7]}, then remove "
            f"and add the label again ({why})",
        )
    return Decision(True, f"{who} added the {label!r} label on {head[:7]}")
