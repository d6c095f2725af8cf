"""An in-memory ``GitHubApi`` for rule tests: plain Python state, no HTTP, no PyGithub.

``MemoryGitHub`` is both the world (set up with the same calls as the HTTP fake's
``FakeGitHub``: ``add_pull``, ``push``, ``label``, ``grant``, ``add_comment``, ``add_run``,
``add_stage_run``, ``add_job``, ``add_artifact``, ``post_status``, ``diffs``, ``main_commits``)
and the API the bot calls. It answers as ``PyGithubApi`` over ``FakeGitHub`` does, raising the
same ``GitHubError`` for a missing object and the same ``ValueError`` for a value GitHub would
refuse; tests/bot/github/test_github_conformance.py runs the same scenarios against both, so the two
cannot drift apart. It records every call (``calls``) and write (``writes``), as Prow's fakegithub
does. It injects no HTTP faults: retries belong to the adapter's tests.
"""

from __future__ import annotations

import io
import itertools
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from github_server import INPUT, WORKFLOWS, user_id

from stagebot.bot.github import (
    Artifact,
    Comment,
    GitHubError,
    Permission,
    PullRequest,
    RunInfo,
    Status,
    TimelineEvent,
)
from stagebot.bot.github.data import (
    check_reaction,
    check_status_state,
    fit_status_description,
)

BOT = "github-actions[bot]"
COMMENT_MAX = 65536  # GitHub refuses longer comment bodies
CREATED_AT = "2026-01-01T00:00:00+00:00"  # every comment's time, as the HTTP fake stamps them
WRITES = (
    "create_comment",
    "edit_comment",
    "react",
    "set_status",
    "cancel_run",
    "dispatch_workflow",
)


def _missing(what: str) -> GitHubError:
    return GitHubError(f"could not {what}: HTTP 404: Not Found")


@dataclass
class _Run:
    info: RunInfo
    jobs: dict[str, str]  # job name -> its page


class MemoryGitHub:
    """``GitHubApi`` over dicts and lists; ``login`` is who the token writes as."""

    def __init__(
        self,
        repository: str = "octo-org/octo-repo",
        base: str = "https://github.example",
        login: str = BOT,
    ) -> None:
        self.repository = self.repo = repository
        self.base = base
        self.login = login
        self.pulls: dict[int, PullRequest] = {}
        self.files: dict[int, list[str]] = {}
        self.main_commits: list[str] = []  # the default branch's commits, newest first
        self.events: dict[int, list[TimelineEvent]] = {}  # PR -> its timeline, oldest first
        self.issue_comments: dict[int, Comment] = {}
        self.issue_of: dict[int, int] = {}  # comment id -> its PR
        self.reactions: list[tuple[int, str]] = []  # (comment id, content)
        self.commit_statuses: dict[str, list[Status]] = {}  # sha -> statuses, oldest first
        self.permissions: dict[str, tuple[str, str]] = {}  # login -> (legacy, role_name)
        self.runs: dict[int, _Run] = {}
        self.diffs: dict[tuple[str, str], list[str]] = {}  # (base, head) -> changed files
        self.artifacts: dict[int, tuple[Artifact, bytes]] = {}
        self.calls: list[str] = []  # every GitHubApi call, by method name
        self._ids = itertools.count(1001)

    # ---------------------------------------------------------------- the world: set-up
    def add_pull(
        self,
        number: int,
        *,
        head_sha: str,
        author: str = "contributor",
        labels: tuple[str, ...] = (),
        files: tuple[str, ...] = ("README.md",),
        fork: bool = False,
    ) -> PullRequest:
        owner = author if fork else self.repo.split("/")[0]
        self.pulls[number] = PullRequest(
            number=number,
            head_sha=head_sha,
            author=author,
            labels=tuple(labels),
            base_ref="main",
            base_sha="0" * 40,
            head_repo=f"{owner}/{self.repo.split('/')[1]}",
            fork=fork,
            html_url=f"{self.base}/{self.repo}/pull/{number}",
        )
        self.files[number] = list(files)
        return self.pulls[number]

    def push(self, number: int, sha: str, *, force: bool = False) -> None:
        """The PR's author pushes ``sha`` on top (or force-pushes it): the new head, and the
        timeline's event."""
        pull = self.pulls[number]
        self.pulls[number] = replace(pull, head_sha=sha)
        self._event(number, "head_ref_force_pushed" if force else "committed", None)

    def label(self, number: int, name: str, actor: str, *, remove: bool = False) -> None:
        """``actor`` adds (or removes) a label: the label list and a timeline event."""
        pull = self.pulls[number]
        labels = tuple(label for label in pull.labels if label != name)
        self.pulls[number] = replace(pull, labels=labels if remove else (*labels, name))
        self._event(number, "unlabeled" if remove else "labeled", actor, label=name)

    def grant(self, login: str, role_name: str) -> None:
        """Give ``login`` a repository role; the legacy permission folds maintain/triage."""
        legacy = {"maintain": "write", "triage": "read"}.get(role_name, role_name)
        self.permissions[login] = (legacy, role_name)

    def add_comment(
        self, number: int, body: str, author: str = "someone", comment_id: int | None = None
    ) -> Comment:
        return self._new_comment(number, body, author, comment_id)

    def add_run(
        self, run_number: int, status: str = "in_progress", run_id: int | None = None, **fields
    ) -> RunInfo:
        """A workflow run (default: a bot.yml run on main, started by a comment); ``fields``
        override any of RunInfo's fields (path, event, head_branch, head_repo, display_title)."""
        run_id = run_id or 50000 + run_number
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        info = RunInfo(
            id=run_id,
            path=".github/workflows/bot.yml",
            event="issue_comment",
            head_branch="main",
            head_sha="0" * 40,
            head_repo=self.repo,
            display_title="bot",
            status=status,
            conclusion=None,
            html_url=f"{self.base}/{self.repo}/actions/runs/{run_id}",
            created_at=now,
            started_at=now,
        )
        self.runs[run_id] = _Run(replace(info, **fields), {})
        return self.runs[run_id].info

    def add_stage_run(
        self, pipeline: int, status: str = "in_progress", pr: int | None = None, plan_run: int = 1
    ) -> RunInfo:
        """A run of stage.yml as the bot dispatches it for ``pipeline`` (its title names it)."""
        key = f"pr-{pr}" if pr else "main"
        return self.add_run(
            pipeline,
            status=status,
            run_id=80000 + pipeline,
            path=".github/workflows/stage.yml",
            event="workflow_dispatch",
            head_branch="stagebot-stage",
            display_title=f"stagebot {key} pipeline {pipeline} plan-run {plan_run}",
        )

    def add_job(self, run_id: int, name: str) -> str:
        """A job of run ``run_id`` (a stage job is named after its stage); returns its page."""
        job_id = 70000 + sum(len(run.jobs) for run in self.runs.values())
        url = f"{self.base}/{self.repo}/actions/runs/{run_id}/job/{job_id}"
        self.runs[run_id].jobs[name] = url
        return url

    def add_artifact(
        self, run_id: int, name: str, files: dict[str, bytes], expired: bool = False
    ) -> Artifact:
        """An artifact of run ``run_id`` holding ``files`` (path -> bytes), zipped."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for path, data in files.items():
                archive.writestr(path, data)
        blob = buffer.getvalue()
        artifact = Artifact(next(self._ids), name, len(blob), expired, run_id)
        self.artifacts[artifact.id] = (artifact, blob)
        return artifact

    def post_status(self, sha: str, state: str, context: str, description: str) -> None:
        """A status written by another client (another job, a person)."""
        self.commit_statuses.setdefault(sha, []).append(Status(state, description, context, None))

    # ---------------------------------------------------------------- the world: queries
    @property
    def writes(self) -> list[str]:
        return [call for call in self.calls if call in WRITES]

    def bot_comments(self, number: int, login: str = BOT) -> list[Comment]:
        return [
            c
            for c in self.issue_comments.values()
            if self.issue_of[c.id] == number and c.author == login
        ]

    def latest_status(self, sha: str, context: str) -> Status | None:
        mine = [s for s in self.commit_statuses.get(sha, []) if s.context == context]
        return mine[-1] if mine else None

    def reactions_to(self, comment_id: int) -> list[str]:
        return [content for target, content in self.reactions if target == comment_id]

    # ---------------------------------------------------------------- GitHubApi: reads
    def pull(self, number: int) -> PullRequest:
        self.calls.append("pull")
        return self._pull(number, f"get pull request {self.repo}#{number}")

    def changed_files(self, number: int) -> list[str]:
        self.calls.append("changed_files")
        self._pull(number, f"list the changed files of {self.repo}#{number}")
        return list(self.files[number])

    def timeline(self, number: int) -> list[TimelineEvent]:
        self.calls.append("timeline")
        return list(self.events.get(number, []))

    def permission(self, login: str) -> Permission:
        self.calls.append("permission")
        legacy, role = self.permissions.get(login, ("read", "read"))  # GitHub: public repo
        return Permission(role, legacy)

    def comments(self, number: int) -> list[Comment]:
        self.calls.append("comments")
        return [c for c in self.issue_comments.values() if self.issue_of[c.id] == number]

    def active_runs(self, workflow: str) -> list[RunInfo]:
        self.calls.append("active_runs")
        return [
            run.info
            for status in ("queued", "in_progress")
            for run in self.runs.values()
            if run.info.status == status and run.info.path.endswith("/" + workflow)
        ]

    def dispatched_runs(self, workflow: str, branch: str, since: str) -> list[RunInfo]:
        """Newest first, as GitHub lists them."""
        self.calls.append("dispatched_runs")
        return [
            run.info
            for _, run in sorted(self.runs.items(), reverse=True)
            if run.info.path.endswith("/" + workflow)
            and run.info.event == "workflow_dispatch"
            and run.info.head_branch == branch
            and run.info.created_at >= since
        ]

    def compare_files(self, base: str, head: str) -> list[str]:
        self.calls.append("compare_files")
        if (base, head) not in self.diffs:
            raise _missing(f"compare {base[:7]}...{head[:7]} in {self.repo}")
        return list(self.diffs[base, head])

    def statuses(self, sha: str, context: str) -> list[Status]:
        self.calls.append("statuses")
        return [s for s in reversed(self.commit_statuses.get(sha, [])) if s.context == context]

    def job_urls(self, run_id: int) -> dict[str, str]:
        self.calls.append("job_urls")
        run = self.runs.get(run_id)
        return dict(run.jobs) if run else {}

    def default_branch(self) -> str:
        self.calls.append("default_branch")
        return "main"

    def workflow_run(self, run_id: int) -> RunInfo:
        self.calls.append("workflow_run")
        return self._run(run_id, f"get workflow run {run_id} of {self.repo}").info

    def run_artifacts(self, run_id: int) -> list[Artifact]:
        self.calls.append("run_artifacts")
        self._run(run_id, f"list the artifacts of workflow run {run_id} in {self.repo}")
        found = [a for a, _ in self.artifacts.values() if a.run_id == run_id]
        return sorted(found, key=lambda a: -a.id)

    def branch_commits(self, branch: str, count: int) -> list[str]:
        """The default branch's commits (the only branch this fake has)."""
        self.calls.append("branch_commits")
        if branch != "main":
            raise _missing(f"list the commits of {branch} in {self.repo}")
        return self.main_commits[:count]

    def download_artifact(self, artifact_id: int, limit: int, dest: Path) -> None:
        self.calls.append("download_artifact")
        what = f"download artifact {artifact_id} of {self.repo}"
        if artifact_id not in self.artifacts:
            raise _missing(what)
        artifact, blob = self.artifacts[artifact_id]
        if artifact.expired:
            raise GitHubError(f"could not {what}: HTTP 410: Gone")
        if len(blob) > limit:
            raise GitHubError(
                f"artifact {artifact_id} is larger than the {limit} bytes the bot reads"
            )
        Path(dest).write_bytes(blob)

    # ---------------------------------------------------------------- GitHubApi: writes
    def create_comment(
        self, number: int, body: str, recover: Callable[[], Comment | None] | None = None
    ) -> Comment:
        self.calls.append("create_comment")
        what = f"post a comment on {self.repo}#{number}"
        if number not in self.pulls:
            raise _missing(what)
        _check_length(body, what)
        return self._new_comment(number, body, self.login)

    def edit_comment(self, comment_id: int, body: str) -> None:
        self.calls.append("edit_comment")
        what = f"edit comment {comment_id} on {self.repo}"
        if comment_id not in self.issue_comments:
            raise _missing(what)
        _check_length(body, what)
        self.issue_comments[comment_id] = replace(self.issue_comments[comment_id], body=body)

    def react(self, comment_id: int, content: str) -> None:
        self.calls.append("react")
        check_reaction(content)
        if comment_id not in self.issue_comments:
            raise _missing(f"react {content} to comment {comment_id} on {self.repo}")
        if (comment_id, content) not in self.reactions:  # GitHub keeps one of each
            self.reactions.append((comment_id, content))

    def set_status(
        self, sha: str, state: str, context: str, description: str, target_url: str | None
    ) -> None:
        self.calls.append("set_status")
        check_status_state(state)
        status = Status(state, fit_status_description(description), context, target_url or None)
        self.commit_statuses.setdefault(sha, []).append(status)

    def cancel_run(self, run_id: int) -> bool:
        self.calls.append("cancel_run")
        run = self._run(run_id, f"cancel workflow run {run_id} in {self.repo}")
        if run.info.status == "completed":
            return False
        run.info = replace(run.info, status="completed", conclusion="cancelled")
        return True

    def dispatch_workflow(
        self, workflow: str, ref: str, inputs: dict[str, str], recover: Callable[[], int | None]
    ) -> int:
        """workflow_dispatch as GitHub answers it: the workflow file's declared inputs, and the
        new run's title rendered from its ``run-name``."""
        self.calls.append("dispatch_workflow")
        what = f"dispatch {workflow} on {ref} in {self.repo}"
        path = WORKFLOWS / workflow
        if not path.is_file():
            raise _missing(what)
        spec = yaml.safe_load(path.read_text())
        declared = (spec.get(True) or spec.get("on"))["workflow_dispatch"]["inputs"]
        unexpected = sorted(set(inputs) - set(declared))
        missing = sorted(k for k, v in declared.items() if v.get("required") and k not in inputs)
        if unexpected or missing:
            raise GitHubError(
                f"could not {what}: HTTP 422: Unexpected inputs {unexpected}, missing {missing}"
            )
        title = INPUT.sub(lambda m: str(inputs.get(m[1], "")), spec.get("run-name", spec["name"]))
        run_id = next(self._ids) + 70000
        self.add_run(
            run_id - 70000,
            status="queued",
            run_id=run_id,
            path=f".github/workflows/{workflow}",
            event="workflow_dispatch",
            head_branch=ref,
            display_title=title,
        )
        return run_id

    # ---------------------------------------------------------------- internals
    def _pull(self, number: int, what: str) -> PullRequest:
        if number not in self.pulls:
            raise _missing(what)
        return self.pulls[number]

    def _run(self, run_id: int, what: str) -> _Run:
        if run_id not in self.runs:
            raise _missing(what)
        return self.runs[run_id]

    def _new_comment(
        self, number: int, body: str, author: str, comment_id: int | None = None
    ) -> Comment:
        comment_id = comment_id or next(self._ids)
        comment = Comment(
            id=comment_id,
            author=author,
            author_type="Bot" if author.endswith("[bot]") else "User",
            body=body,
            html_url=f"{self.base}/{self.repo}/pull/{number}#issuecomment-{comment_id}",
            created_at=CREATED_AT,
        )
        self.issue_comments[comment.id] = comment
        self.issue_of[comment.id] = number
        self._event(number, "commented", author, comment_id=comment.id)
        return comment

    def _event(self, number: int, kind: str, actor: str | None, **fields: Any) -> None:
        actor_id = user_id(actor) if actor else None
        self.events.setdefault(number, []).append(TimelineEvent(kind, actor, actor_id, **fields))


def _check_length(body: str, what: str) -> None:
    if len(body) > COMMENT_MAX:
        raise GitHubError(
            f"could not {what}: HTTP 422: Body is too long (maximum is {COMMENT_MAX} characters)"
        )
