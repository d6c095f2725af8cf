"""Who may do what: repository permission (role_name first), the allowlist, the approval label.

| command | needs |
|---|---|
| help | anyone |
| run, kill | write or higher, or a login in the allowlist |
| skip, reuse-pipeline | maintain or admin |
| a run whose plan needs approval | also the approval label on the PR |

A fork PR's author is treated like anyone else: by permission.
"""

from __future__ import annotations

from dataclasses import dataclass

from stagebot.bot.config import BotConfig
from stagebot.bot.github import Permission
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


def authorize(command: str, login: str, permission: Permission, config: BotConfig) -> Decision:
    needed = REQUIRED_LEVEL[command]
    if needed is None:
        return Decision(True, "anyone may ask for help")
    if permission.at_least(needed):
        return Decision(True, f"@{login} has {permission.level} permission")
    if needed == ALLOWLIST_GRANTS and config.allowlisted(login):
        return Decision(True, f"@{login} is in the allowlist of {config.source}")
    has = permission.level
    if needed == "write":
        return Decision(
            False,
            f"`/bot {command}` needs write permission on the repository (or a login in the "
            f"bot's allowlist); @{login} has {has}",
        )
    return Decision(
        False, f"`/bot {command}` needs maintain or admin permission; @{login} has {has}"
    )


def approve(
    needs_approval: bool, reasons: list[str], labels: tuple[str, ...], config: BotConfig
) -> Decision:
    """A plan that needs approval runs only with the approval label on the PR."""
    if not needs_approval:
        return Decision(True, "the plan needs no approval")
    if config.approval_label in labels:
        return Decision(True, f"the PR has the {config.approval_label!r} label")
    return Decision(
        False,
        f"this plan needs the {config.approval_label!r} label on the PR, which a CI approver "
        f"applies ({'; '.join(escape(reason) for reason in reasons)})",
    )
