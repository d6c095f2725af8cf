"""The plain data the bot gets from GitHub, the values GitHub accepts, and the adapter's errors."""

from __future__ import annotations

from dataclasses import dataclass, field

from stagebot.stages.errors import StagebotError

PERMISSION_LEVELS = ("none", "read", "triage", "write", "maintain", "admin")
REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")
STATUS_STATES = ("error", "failure", "pending", "success")
STATUS_DESCRIPTION_MAX = 140  # GitHub rejects longer commit-status descriptions


def check_reaction(content: str) -> None:
    """Refuse, before any request, a reaction GitHub does not have."""
    if content not in REACTIONS:
        raise ValueError(f"reaction {content!r} is not one of {REACTIONS}")


def check_status_state(state: str) -> None:
    """Refuse, before any request, a commit-status state GitHub does not have."""
    if state not in STATUS_STATES:
        raise ValueError(f"status state {state!r} is not one of {STATUS_STATES}")


def fit_status_description(text: str) -> str:
    """``text`` as a commit status's description: cut to what GitHub accepts, with an ellipsis."""
    if len(text) <= STATUS_DESCRIPTION_MAX:
        return text
    return text[: STATUS_DESCRIPTION_MAX - 1] + "…"


class GitHubError(StagebotError):
    """GitHub could not be reached, or refused a call, after the bounded retries."""

    exit_code = 3


class SetupError(StagebotError):
    """A required Actions variable is missing or malformed."""


@dataclass(frozen=True)
class PullRequest:
    number: int
    head_sha: str
    author: str
    labels: tuple[str, ...]
    base_ref: str
    base_sha: str
    head_repo: str | None  # owner/name of the head repository (a fork's, for fork PRs)
    fork: bool
    html_url: str


@dataclass(frozen=True)
class Comment:
    id: int
    author: str
    author_type: str  # "User" | "Bot" | "Organization"
    body: str
    html_url: str = ""
    created_at: str = ""  # ISO 8601, GitHub's clock


@dataclass(frozen=True)
class Permission:
    """A login's repository permission: ``role_name`` (admin, maintain, write, triage, read,
    none, or a custom role) and the legacy ``permission`` that folds maintain into write."""

    role_name: str
    permission: str

    @property
    def level(self) -> str:
        """The effective built-in level; a custom role counts as its legacy base permission."""
        if self.role_name in PERMISSION_LEVELS:
            return self.role_name
        return self.permission if self.permission in PERMISSION_LEVELS else "none"

    def at_least(self, level: str) -> bool:
        return PERMISSION_LEVELS.index(self.level) >= PERMISSION_LEVELS.index(level)


@dataclass(frozen=True)
class Status:
    state: str
    description: str
    context: str
    target_url: str | None = None


@dataclass(frozen=True)
class TimelineEvent:
    """One issue-timeline event, in GitHub's order: ``labeled`` / ``unlabeled`` (``label``),
    ``commented`` (``comment_id``), ``head_ref_force_pushed``, and others the bot ignores."""

    kind: str
    actor: str | None
    actor_id: int | None
    label: str | None = None
    comment_id: int | None = None  # a "commented" event's comment


@dataclass(frozen=True)
class RunInfo:
    """One workflow run as the report checks it: which workflow file ran (``path``), on what
    event, branch and repository, and how it ended."""

    id: int
    path: str  # e.g. ".github/workflows/stage.yml"
    event: str
    head_branch: str
    head_sha: str
    head_repo: str  # owner/name of the repository the run's code came from
    display_title: str
    status: str
    conclusion: str | None
    html_url: str
    # when GitHub created and started the run (ISO 8601, UTC; "" when it did not say): left
    # out of the repr, which the conformance test compares across fakes of different clocks
    created_at: str = field(default="", repr=False)
    started_at: str = field(default="", repr=False)


@dataclass(frozen=True)
class Artifact:
    id: int
    name: str
    size: int
    expired: bool
    run_id: int | None
