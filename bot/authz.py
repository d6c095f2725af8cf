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

from collections.abc import Callable
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


PUSHES = ("committed", "head_ref_force_pushed")


def approve(
    needs_approval: bool,
    reasons: list[str],
    labels: tuple[str, ...],
    config: BotConfig,
    timeline: Callable[[], list[TimelineEvent]] = list,
    is_approver: Callable[[TimelineEvent], bool] = lambda event: False,
) -> Decision:
    """A plan that needs approval runs only with the approval label on the PR, and only when the
    timeline's last ``labeled`` event for it (none ``unlabeled`` since) is a CI approver's and
    no push (``committed``, ``head_ref_force_pushed``) came after it: the approval is for the
    commits the approver saw. ``timeline`` is read only when the label is there."""
    if not needs_approval:
        return Decision(True, "the plan needs no approval")
    label = config.approval_label
    why = "; ".join(escape(reason) for reason in reasons)
    if label not in labels:
        return Decision(
            False,
            f"this plan needs the {label!r} label on the PR, which a CI approver applies ({why})",
        )
    added: TimelineEvent | None = None
    pushed = False
    for event in timeline():
        if event.kind in ("labeled", "unlabeled") and event.label == label:
            added, pushed = (event if event.kind == "labeled" else None), False
        elif event.kind in PUSHES:
            pushed = True
    if added is None:
        return Decision(False, f"the {label!r} label has no labeled event on the PR's timeline")
    if not is_approver(added):
        return Decision(
            False,
            f"the {label!r} label was added by @{escape(added.actor or 'ghost')}, who is not a "
            "CI approver (maintain or admin permission, or the approvers list); an approver "
            f"must add it ({why})",
        )
    if pushed:
        return Decision(
            False,
            f"the PR got new commits after @{escape(added.actor or 'ghost')} added the "
            f"{label!r} label, which approved only the commits before; an approver must "
            f"review them and add the label again (remove it, then add it) ({why})",
        )
    return Decision(True, f"@{escape(added.actor or 'ghost')} added the {label!r} label")
