"""``GitHubApi``: the narrow interface of just the calls the bot makes.

Everything outside this package talks to GitHub through it. ``client.PyGithubApi`` implements it
over PyGithub; the tests' in-memory fake (tests/helpers/memory_github.py) implements it over plain
Python state, and tests/bot/github/test_github_conformance.py holds the two to the same answers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from stagebot.bot.github.data import (
    Artifact,
    Comment,
    Permission,
    PullRequest,
    RunInfo,
    Status,
    TimelineEvent,
)


class GitHubApi(Protocol):
    """The calls the bot makes; every implementation retries and raises GitHubError."""

    repository: str

    def pull(self, number: int) -> PullRequest: ...

    def changed_files(self, number: int) -> list[str]: ...

    def timeline(self, number: int) -> list[TimelineEvent]: ...

    def permission(self, login: str) -> Permission: ...

    def comments(self, number: int) -> list[Comment]: ...

    def create_comment(
        self, number: int, body: str, recover: Callable[[], Comment | None] | None = None
    ) -> Comment: ...

    def edit_comment(self, comment_id: int, body: str) -> None: ...

    def react(self, comment_id: int, content: str) -> None: ...

    def set_status(
        self, sha: str, state: str, context: str, description: str, target_url: str | None
    ) -> None: ...

    def active_runs(self, workflow: str) -> list[RunInfo]: ...

    def compare_files(self, base: str, head: str) -> list[str]: ...

    def statuses(self, sha: str, context: str) -> list[Status]: ...

    def cancel_run(self, run_id: int) -> bool: ...

    def dispatched_runs(self, workflow: str, branch: str, since: str) -> list[RunInfo]: ...

    def job_urls(self, run_id: int) -> dict[str, str]: ...

    def default_branch(self) -> str: ...

    def workflow_run(self, run_id: int) -> RunInfo: ...

    def run_artifacts(self, run_id: int) -> list[Artifact]: ...

    def branch_commits(self, branch: str, count: int) -> list[str]: ...

    def download_artifact(self, artifact_id: int, limit: int, dest: Path) -> None: ...

    def dispatch_workflow(
        self, workflow: str, ref: str, inputs: dict[str, str], recover: Callable[[], int | None]
    ) -> int: ...
