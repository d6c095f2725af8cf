"""The GitHub adapter: the only module that imports PyGithub (``github``), and only lazily.

Everything else talks to GitHub through ``GitHubApi``, a narrow interface of just the calls the
bot makes, returning plain dataclasses; tests give it an in-memory fake or run the real
``PyGithubApi`` against a local fake REST server.

Retries (``RetryPolicy``):
- reads go through PyGithub's own ``GithubRetry`` (urllib3): 5xx, 429, 403 secondary rate limits
  (``Retry-After`` honoured), connection errors and read timeouts, with bounded exponential backoff;
- artifact downloads (a redirect to storage, around PyGithub) go through this module's own
  retry loop with the same policy, streamed to a file;
- writes are never retried blindly by urllib3 (a POST that timed out may have happened): this
  module retries them itself and, after an ambiguous failure (5xx, timeout, dropped connection),
  first asks a ``recover`` callback whether the write landed (for a reply: our marker is on the
  PR) before writing again. Idempotent writes (PATCH, statuses, reactions, cancels) just repeat;
- a wait longer than ``max_wait`` (a long Retry-After or rate-limit reset) is not waited for.
Permanent failures (4xx other than rate limits, retries exhausted) raise ``GitHubError`` with
what was being done and GitHub's answer; nothing is swallowed.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from stagebot.stages.errors import StagebotError

T = TypeVar("T")
PERMISSION_LEVELS = ("none", "read", "triage", "write", "maintain", "admin")
REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")
STATUS_STATES = ("error", "failure", "pending", "success")
STATUS_DESCRIPTION_MAX = 140  # GitHub rejects longer commit-status descriptions


class GitHubError(StagebotError):
    """GitHub could not be reached, or refused a call, after the bounded retries."""

    exit_code = 3


class SetupError(StagebotError):
    """A required Actions variable is missing or malformed."""


# ---------------------------------------------------------------- plain data the bot uses


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


@dataclass(frozen=True)
class Artifact:
    id: int
    name: str
    size: int
    expired: bool
    run_id: int | None


class GitHubApi(Protocol):
    """The calls the bot makes; every implementation retries and raises GitHubError."""

    repository: str

    def pull(self, number: int) -> PullRequest: ...

    def changed_files(self, number: int) -> list[str]: ...

    def pull_commits(self, number: int) -> list[str]: ...

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

    def job_urls(self, run_id: int) -> dict[str, str]: ...

    def default_branch(self) -> str: ...

    def workflow_run(self, run_id: int) -> RunInfo: ...

    def run_artifacts(self, run_id: int) -> list[Artifact]: ...

    def branch_commits(self, branch: str, count: int) -> list[str]: ...

    def download_artifact(self, artifact_id: int, limit: int, dest: Path) -> None: ...

    def dispatch_workflow(
        self, workflow: str, ref: str, inputs: dict[str, str], recover: Callable[[], int | None]
    ) -> int: ...


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries. The n-th retry waits ``backoff_base * 2**(n-1)`` seconds (at most
    ``backoff_max``) or what GitHub asks (Retry-After, rate-limit reset) when that is longer;
    a wait over ``max_wait`` fails at once instead."""

    attempts: int = 4  # tries per call, the first included
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    max_wait: float = 120.0
    secondary_rate_wait: float = 60.0  # GitHub's advice when a 403 carries no Retry-After
    timeout: float = 15.0  # seconds per HTTP request (rounded up to a whole second)
    seconds_between_requests: float = 0.25  # PyGithub's throttle, kept for real GitHub
    seconds_between_writes: float = 1.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    ENV = {
        "STAGEBOT_GITHUB_ATTEMPTS": "attempts",
        "STAGEBOT_GITHUB_BACKOFF_S": "backoff_base",
        "STAGEBOT_GITHUB_MAX_WAIT_S": "max_wait",
        "STAGEBOT_GITHUB_TIMEOUT_S": "timeout",
        "STAGEBOT_GITHUB_THROTTLE_S": "seconds_between_requests",
    }

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> RetryPolicy:
        """Defaults, overridden by STAGEBOT_GITHUB_* variables (tests make the waits tiny;
        STAGEBOT_GITHUB_THROTTLE_S sets both of PyGithub's throttles)."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for variable, name in cls.ENV.items():
            if environ.get(variable):
                try:
                    number = float(environ[variable])
                except ValueError:
                    raise SetupError(f"{variable}={environ[variable]!r} is not a number") from None
                values[name] = int(number) if name == "attempts" else number
        if "seconds_between_requests" in values:
            values["seconds_between_writes"] = values["seconds_between_requests"]
        if values.get("attempts", 1) < 1:
            raise SetupError("STAGEBOT_GITHUB_ATTEMPTS must be at least 1")
        values.setdefault("secondary_rate_wait", min(60.0, values.get("max_wait", 120.0)))
        if "backoff_base" in values and values["backoff_base"] < 1:
            values["secondary_rate_wait"] = values["backoff_base"]
        return cls(**values)

    def backoff(self, retry: int) -> float:
        return min(self.backoff_max, self.backoff_base * 2 ** (retry - 1))


@dataclass(frozen=True)
class ActionsEnv:
    """The standard GitHub Actions variables the bot reads (GitHub Enterprise works too).

    Defaults when absent: GITHUB_API_URL https://api.github.com, GITHUB_SERVER_URL
    https://github.com, GITHUB_RUN_NUMBER / GITHUB_RUN_ID none (the pipeline number then comes
    from the bot's earlier replies, the run link is left out), GITHUB_OUTPUT none (outputs are
    printed). GITHUB_REPOSITORY, GITHUB_EVENT_NAME and GITHUB_EVENT_PATH are required;
    GITHUB_TOKEN only once a call to GitHub is needed."""

    repository: str
    event_name: str
    event_path: str
    api_url: str = "https://api.github.com"
    server_url: str = "https://github.com"
    token: str | None = None
    output: str | None = None
    run_id: int | None = None
    run_number: int | None = None
    run_attempt: int = 1  # GITHUB_RUN_ATTEMPT: above 1 when a job of the run is re-run

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ActionsEnv:
        environ = os.environ if environ is None else environ
        missing = [
            name
            for name in ("GITHUB_REPOSITORY", "GITHUB_EVENT_NAME", "GITHUB_EVENT_PATH")
            if not environ.get(name)
        ]
        if missing:
            raise SetupError(
                f"{', '.join(missing)} not set: run inside GitHub Actions or set them "
                "(GITHUB_EVENT_PATH names the webhook payload JSON file)"
            )
        repository = environ["GITHUB_REPOSITORY"]
        if repository.count("/") != 1 or not all(repository.split("/")):
            raise SetupError(f"GITHUB_REPOSITORY={repository!r} is not owner/name")
        return cls(
            repository=repository,
            event_name=environ["GITHUB_EVENT_NAME"],
            event_path=environ["GITHUB_EVENT_PATH"],
            api_url=(environ.get("GITHUB_API_URL") or cls.api_url).rstrip("/"),
            server_url=(environ.get("GITHUB_SERVER_URL") or cls.server_url).rstrip("/"),
            token=environ.get("GITHUB_TOKEN") or None,
            output=environ.get("GITHUB_OUTPUT") or None,
            run_id=_positive_int(environ, "GITHUB_RUN_ID"),
            run_number=_positive_int(environ, "GITHUB_RUN_NUMBER"),
            run_attempt=_positive_int(environ, "GITHUB_RUN_ATTEMPT") or 1,
        )

    @property
    def run_url(self) -> str | None:
        if self.run_id is None:
            return None
        return f"{self.server_url}/{self.repository}/actions/runs/{self.run_id}"


def _positive_int(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name)
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise SetupError(f"{name}={raw!r} is not a positive integer")
    return int(raw)


def connect(env: ActionsEnv, policy: RetryPolicy | None = None) -> PyGithubApi:
    if not env.token:
        raise SetupError(
            "GITHUB_TOKEN is not set: the bot needs a token to talk to "
            f"{env.api_url} (in Actions: env: GITHUB_TOKEN: ${{{{ github.token }}}})"
        )
    return PyGithubApi(env.api_url, env.repository, env.token, policy or RetryPolicy())


# ---------------------------------------------------------------- the PyGithub implementation


@dataclass(frozen=True)
class _Failure:
    transient: bool
    ambiguous: bool  # the request may have been performed (a write may have landed)
    wait: float | None  # what GitHub asked us to wait, if it said
    text: str


class PyGithubApi:
    """``GitHubApi`` over PyGithub, for github.com or a GitHub Enterprise ``api_url``."""

    def __init__(self, api_url: str, repository: str, token: str, policy: RetryPolicy) -> None:
        import github  # the one place the bot imports PyGithub

        self.repository = repository
        self.policy = policy
        self._token = token  # artifact downloads go around PyGithub (a redirect to storage)
        self._api_url = api_url.rstrip("/")
        self._gh = github.Github(
            base_url=api_url,
            auth=github.Auth.Token(token),
            retry=_read_retry(policy),
            timeout=max(1, math.ceil(policy.timeout)),  # PyGithub insists on whole seconds
            per_page=100,
            lazy=True,
            user_agent="stagebot",
            seconds_between_requests=policy.seconds_between_requests,
            seconds_between_writes=policy.seconds_between_writes,
        )
        self._repo = self._gh.get_repo(repository)  # lazy: no request

    # ---- reads (urllib3 retries inside PyGithub; a failure here is final)
    def pull(self, number: int) -> PullRequest:
        def call() -> PullRequest:
            pull = self._repo.get_pull(number)
            head_repo = pull.head.repo.full_name if pull.head.repo is not None else None
            return PullRequest(
                number=pull.number,
                head_sha=pull.head.sha,
                author=pull.user.login,
                labels=tuple(label.name for label in pull.labels),
                base_ref=pull.base.ref,
                base_sha=pull.base.sha,
                head_repo=head_repo,
                fork=head_repo != self.repository,
                html_url=pull.html_url,
            )

        return self._read(f"get pull request {self.repository}#{number}", call)

    def changed_files(self, number: int) -> list[str]:
        return self._read(
            f"list the changed files of {self.repository}#{number}",
            lambda: [f.filename for f in self._repo.get_pull(number).get_files()],
        )

    def pull_commits(self, number: int) -> list[str]:
        """The SHAs of the pull request's commits (GitHub lists at most 250)."""
        return self._read(
            f"list the commits of {self.repository}#{number}",
            lambda: [c.sha for c in self._repo.get_pull(number).get_commits()],
        )

    def timeline(self, number: int) -> list[TimelineEvent]:
        def call() -> list[TimelineEvent]:
            events = []
            for item in self._repo.get_issue(number).get_timeline():
                data = item.raw_data
                actor = data.get("actor") or {}
                events.append(
                    TimelineEvent(
                        kind=str(data.get("event") or ""),
                        actor=actor.get("login"),
                        actor_id=actor.get("id"),
                        label=(data.get("label") or {}).get("name"),
                        comment_id=data.get("id") if data.get("event") == "commented" else None,
                    )
                )
            return events

        return self._read(f"list the timeline of {self.repository}#{number}", call)

    def permission(self, login: str) -> Permission:
        def call() -> Permission:
            import github

            try:
                _, data = self._gh.requester.requestJsonAndCheck(
                    "GET", f"{self._repo.url}/collaborators/{login}/permission"
                )
            except github.UnknownObjectException:
                return Permission("none", "none")  # not a user GitHub knows here
            return Permission(data.get("role_name") or "none", data.get("permission") or "none")

        return self._read(f"get {login}'s permission on {self.repository}", call)

    def comments(self, number: int) -> list[Comment]:
        return self._read(
            f"list the comments of {self.repository}#{number}",
            lambda: [_comment(c) for c in self._repo.get_issue(number).get_comments()],
        )

    def active_runs(self, workflow: str) -> list[RunInfo]:
        """The queued or running runs of ``workflow`` (any event, branch or repository: the
        caller checks which are the bot's own)."""

        def call() -> list[RunInfo]:
            import github

            runs: list[RunInfo] = []
            for status in ("queued", "in_progress"):
                listing = github.PaginatedList.PaginatedList(
                    github.WorkflowRun.WorkflowRun,
                    self._gh.requester,
                    f"{self._repo.url}/actions/workflows/{workflow}/runs",
                    {"status": status},
                    list_item="workflow_runs",
                )
                runs += [_run_info(r.raw_data) for r in listing]
            return runs

        return self._read(f"list the active runs of {workflow} in {self.repository}", call)

    def job_urls(self, run_id: int) -> dict[str, str]:
        """Job name -> its page (the job's log) in workflow run ``run_id``: a stage job is named
        after its stage, so the report links each stage's full log."""

        def call() -> dict[str, str]:
            import github

            listing = github.PaginatedList.PaginatedList(
                github.WorkflowJob.WorkflowJob,
                self._gh.requester,
                f"{self._repo.url}/actions/runs/{run_id}/jobs",
                {"filter": "latest"},
                list_item="jobs",
            )
            return {job.name: job.html_url for job in listing}

        return self._read(f"list the jobs of run {run_id} in {self.repository}", call)

    def compare_files(self, base: str, head: str) -> list[str]:
        return self._read(
            f"compare {base[:7]}...{head[:7]} in {self.repository}",
            lambda: [f.filename for f in self._repo.compare(base, head).files],
        )

    def statuses(self, sha: str, context: str) -> list[Status]:
        """The commit's statuses of ``context``, newest first; none for a commit GitHub does not
        know (404 / 422), which has none."""

        def call() -> list[Status]:
            import github

            try:
                listing = list(self._repo.get_commit(sha).get_statuses())
            except github.GithubException as error:
                if error.status in (404, 422):
                    return []
                raise
            return [
                Status(s.state, s.description or "", s.context, s.target_url)
                for s in listing
                if s.context == context
            ]

        return self._read(f"list the statuses of {sha[:7]} in {self.repository}", call)

    def default_branch(self) -> str:
        return self._read(
            f"get the default branch of {self.repository}", lambda: self._repo.default_branch
        )

    def workflow_run(self, run_id: int) -> RunInfo:
        def call() -> RunInfo:
            _, data = self._gh.requester.requestJsonAndCheck(
                "GET", f"{self._repo.url}/actions/runs/{run_id}"
            )
            return _run_info(data)

        return self._read(f"get workflow run {run_id} of {self.repository}", call)

    def run_artifacts(self, run_id: int) -> list[Artifact]:
        return self._artifacts(
            f"list the artifacts of workflow run {run_id}",
            f"{self._repo.url}/actions/runs/{run_id}/artifacts",
            {},
        )

    def branch_commits(self, branch: str, count: int) -> list[str]:
        """The SHAs of ``branch``'s newest ``count`` commits, newest first."""
        import itertools

        return self._read(
            f"list the commits of {branch} in {self.repository}",
            lambda: [c.sha for c in itertools.islice(self._repo.get_commits(sha=branch), count)],
        )

    def _artifacts(self, what: str, url: str, params: dict[str, str]) -> list[Artifact]:
        def call() -> list[Artifact]:
            import github

            listing = github.PaginatedList.PaginatedList(
                github.Artifact.Artifact,
                self._gh.requester,
                url,
                params,
                list_item="artifacts",
            )
            return [
                Artifact(
                    a.id,
                    a.name,
                    a.size_in_bytes,
                    bool(a.expired),
                    a.workflow_run.id if a.workflow_run is not None else None,
                )
                for a in listing
            ]

        return self._read(f"{what} in {self.repository}", call)

    def download_artifact(self, artifact_id: int, limit: int, dest: Path) -> None:
        """Stream the artifact's zip into the file ``dest``. GitHub answers with a redirect to a
        signed storage URL, which is fetched without our token; more than ``limit`` bytes is
        refused. Retried like every other read (5xx, 429 and secondary rate limits with
        Retry-After, dropped connections, timeouts), with the same bounded waits."""

        def call() -> None:
            import github
            import requests

            url = f"{self._api_url}/repos/{self.repository}/actions/artifacts/{artifact_id}/zip"
            timeout = max(1, math.ceil(self.policy.timeout))
            headers = {"Authorization": f"token {self._token}", "User-Agent": "stagebot"}
            first = requests.get(url, headers=headers, allow_redirects=False, timeout=timeout)
            if first.status_code in (301, 302, 303, 307, 308):
                answer = requests.get(
                    first.headers["Location"],
                    headers={"User-Agent": "stagebot"},
                    stream=True,
                    timeout=timeout,
                )
            else:
                answer = first
            if answer.status_code != 200:  # classified (and retried) like PyGithub's errors
                raise github.GithubException(
                    answer.status_code, {"message": answer.reason}, dict(answer.headers)
                )
            size = 0
            with open(dest, "wb") as sink:
                for chunk in answer.iter_content(1 << 16):
                    size += len(chunk)
                    if size > limit:
                        raise GitHubError(
                            f"artifact {artifact_id} is larger than the {limit} bytes the bot reads"
                        )
                    sink.write(chunk)

        self._retried(f"download artifact {artifact_id} of {self.repository}", call)

    # ---- writes (retried here, with recovery after ambiguous failures)
    def create_comment(
        self, number: int, body: str, recover: Callable[[], Comment | None] | None = None
    ) -> Comment:
        return self._retried(
            f"post a comment on {self.repository}#{number}",
            lambda: _comment(self._repo.get_issue(number).create_comment(body)),
            recover,
        )

    def edit_comment(self, comment_id: int, body: str) -> None:
        self._retried(
            f"edit comment {comment_id} on {self.repository}",
            lambda: self._repo.get_issue(0).get_comment(comment_id).edit(body),
        )

    def react(self, comment_id: int, content: str) -> None:
        if content not in REACTIONS:
            raise ValueError(f"reaction {content!r} is not one of {REACTIONS}")
        self._retried(
            f"react {content} to comment {comment_id} on {self.repository}",
            lambda: self._repo.get_issue(0).get_comment(comment_id).create_reaction(content),
        )

    def set_status(
        self, sha: str, state: str, context: str, description: str, target_url: str | None
    ) -> None:
        if state not in STATUS_STATES:
            raise ValueError(f"status state {state!r} is not one of {STATUS_STATES}")
        description = truncate(description, STATUS_DESCRIPTION_MAX)

        def call() -> None:
            extra = {"target_url": target_url} if target_url else {}
            self._repo.get_commit(sha).create_status(
                state, description=description, context=context, **extra
            )

        self._retried(f"set the {context!r} status of {sha[:7]} to {state}", call)

    def cancel_run(self, run_id: int) -> bool:
        """Cancel a workflow run; False when it had already finished (GitHub answers 409)."""

        def call() -> bool:
            import github

            try:
                self._gh.requester.requestJsonAndCheck(
                    "POST", f"{self._repo.url}/actions/runs/{run_id}/cancel"
                )
            except github.GithubException as error:
                if error.status == 409:
                    return False
                raise
            return True

        return self._retried(f"cancel workflow run {run_id} in {self.repository}", call)

    def dispatch_workflow(
        self, workflow: str, ref: str, inputs: dict[str, str], recover: Callable[[], int | None]
    ) -> int:
        """Start ``workflow`` on ``ref`` (workflow_dispatch) and return the new run's id
        (``return_run_details``). Not idempotent: after an ambiguous failure, ``recover`` looks
        for the run before dispatching again."""

        def call() -> int:
            _, data = self._gh.requester.requestJsonAndCheck(
                "POST",
                f"{self._repo.url}/actions/workflows/{workflow}/dispatches",
                input={"ref": ref, "inputs": inputs, "return_run_details": True},
            )
            if not isinstance(data, dict) or not isinstance(data.get("workflow_run_id"), int):
                raise GitHubError(
                    f"dispatching {workflow} returned no workflow_run_id: this GitHub does not "
                    "support return_run_details, which the bot needs to tell its runs apart"
                )
            return data["workflow_run_id"]

        return self._retried(f"dispatch {workflow} on {ref} in {self.repository}", call, recover)

    # ---- the retry loops
    def _read(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except Exception as error:  # classified: GitHubError or re-raised as-is
            failure = _classify(error)
            if failure is None:
                raise
            raise GitHubError(f"could not {what}: {failure.text}") from None

    def _retried(
        self, what: str, call: Callable[[], T], recover: Callable[[], T | None] | None = None
    ) -> T:
        """Writes, and reads that go around PyGithub (artifact downloads): transient failures
        are retried with bounded waits (Retry-After honoured); after an ambiguous one,
        ``recover`` is asked whether the write landed."""
        policy = self.policy
        for attempt in range(1, policy.attempts + 1):
            try:
                return call()
            except Exception as error:  # classified below; anything unknown is re-raised
                failure = _classify(error)
                if failure is None:
                    raise
                if not failure.transient:
                    raise GitHubError(f"could not {what}: {failure.text}") from None
                if attempt == policy.attempts:
                    raise GitHubError(
                        f"could not {what}: still failing after {attempt} attempts ({failure.text})"
                    ) from None
                wait = max(policy.backoff(attempt), failure.wait or 0.0)
                if wait > policy.max_wait:
                    raise GitHubError(
                        f"could not {what}: GitHub asks to wait {wait:.0f}s, longer than the "
                        f"{policy.max_wait:.0f}s this bot waits ({failure.text})"
                    ) from None
                policy.sleep(wait)
                if failure.ambiguous and recover is not None:
                    found = recover()
                    if found is not None:
                        return found
        raise AssertionError("unreachable")


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _run_info(data: dict[str, Any]) -> RunInfo:
    head_repo = (data.get("head_repository") or {}).get("full_name") or ""
    return RunInfo(
        id=int(data["id"]),
        path=str(data.get("path") or ""),
        event=str(data.get("event") or ""),
        head_branch=str(data.get("head_branch") or ""),
        head_sha=str(data.get("head_sha") or ""),
        head_repo=str(head_repo),
        display_title=str(data.get("display_title") or ""),
        status=str(data.get("status") or ""),
        conclusion=data.get("conclusion"),
        html_url=str(data.get("html_url") or ""),
    )


def _comment(item: Any) -> Comment:
    user = item.user
    return Comment(
        id=item.id,
        author=user.login if user is not None else "ghost",
        author_type=(user.type if user is not None else "User") or "User",
        body=item.body or "",
        html_url=item.html_url or "",
        created_at=item.created_at.isoformat() if item.created_at else "",
    )


def _classify(error: Exception) -> _Failure | None:
    """Transient or permanent, and whether a write may have landed; None: not a GitHub error."""
    import github
    import requests
    import urllib3

    if isinstance(error, github.RateLimitExceededExceedsMaxWait):
        return _Failure(False, False, None, f"rate limited for {error.wait:.0f}s: {error.data}")
    if isinstance(error, github.GithubException):
        status = error.status
        message = error.data.get("message") if isinstance(error.data, dict) else error.data
        text = f"HTTP {status}: {message}"
        headers = {k.lower(): v for k, v in (error.headers or {}).items()}
        if status >= 500:
            return _Failure(True, True, _retry_after(headers), text)
        rate_limited = isinstance(error, github.RateLimitExceededException) or (
            "rate limit" in str(message).lower()
        )
        if status in (403, 429) and (rate_limited or "retry-after" in headers):
            wait = _retry_after(headers)
            if wait is None and headers.get("x-ratelimit-remaining") == "0":
                reset = headers.get("x-ratelimit-reset", "")
                wait = max(0.0, float(reset) - time.time()) + 1 if reset.isdigit() else None
            if wait is None:
                wait = 60.0 if status == 403 else None  # GitHub: wait a minute for secondary
            return _Failure(True, False, wait, text)
        return _Failure(False, False, None, text)
    if isinstance(error, requests.exceptions.ConnectTimeout):
        return _Failure(True, False, None, f"connection timed out: {error}")
    if isinstance(error, requests.exceptions.ReadTimeout | urllib3.exceptions.ReadTimeoutError):
        return _Failure(True, True, None, f"no answer in time: {error}")
    if isinstance(error, requests.exceptions.RetryError):
        return _Failure(True, True, None, f"retries exhausted: {error}")
    if isinstance(error, requests.exceptions.ConnectionError):
        return _Failure(True, True, None, f"connection failed: {error}")
    return None


def _retry_after(headers: Mapping[str, str]) -> float | None:
    raw = headers.get("retry-after")
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def _read_retry(policy: RetryPolicy):
    """PyGithub's GithubRetry for reads only, with our bounds and our sleep function."""
    from github import GithubRetry
    from github.GithubException import RateLimitExceededExceedsMaxWait

    class BoundedRetry(GithubRetry):
        def get_backoff_time(self) -> float:
            return policy.backoff(len(self.history)) if self.history else 0.0

        def sleep_for_retry(self, response) -> bool:  # type: ignore[override]
            retry_after = self.get_retry_after(response)
            if retry_after is None:
                return False
            if retry_after > policy.max_wait:
                raise RateLimitExceededExceedsMaxWait(
                    response.status, {"message": "Retry-After too long"}, {}, wait=retry_after
                )
            policy.sleep(max(retry_after, policy.backoff(max(1, len(self.history)))))
            return True

        def _sleep_backoff(self) -> None:
            # GithubRetry replaces get_backoff_time on the instance for secondary rate limits
            policy.sleep(self.get_backoff_time())

    return BoundedRetry(
        total=policy.attempts - 1,
        backoff_factor=policy.backoff_base,
        backoff_max=policy.backoff_max,
        status_forcelist=[*range(500, 600), 429],
        allowed_methods=frozenset({"GET", "HEAD"}),
        raise_on_status=False,
        secondary_rate_wait=policy.secondary_rate_wait,
        max_rate_limit_wait=policy.max_wait,
    )


# ---------------------------------------------------------------- the bot's GitHub App


@dataclass(frozen=True)
class AppIdentity:
    """An installation token of the bot's GitHub App and the login the App writes as."""

    token: str
    login: str  # "<app slug>[bot]"


def mint_installation_token(
    api_url: str,
    repository: str,
    app_id: str,
    private_key: str,
    permissions: dict[str, str],
    policy: RetryPolicy,
) -> AppIdentity:
    """Sign a JWT with the App's private key, find the App's installation on ``repository``
    and mint a token limited to ``permissions`` (GitHub caps it at what the App was granted)."""
    import github
    import jwt  # PyGithub's own dependency, for the App's JWT

    try:
        auth = github.Auth.AppAuth(app_id, private_key)
        auth.create_jwt()  # a malformed key fails here, with no request made
    except (ValueError, TypeError, jwt.PyJWTError) as error:
        raise SetupError(
            f"the GitHub App's private key cannot sign a token ({_one_line(error)}); give the "
            "App's PEM private key (BEGIN RSA PRIVATE KEY) in STAGEBOT_APP_PRIVATE_KEY"
        ) from None
    integration = github.GithubIntegration(
        auth=auth,
        base_url=api_url,
        retry=_read_retry(policy),
        timeout=max(1, math.ceil(policy.timeout)),
        user_agent="stagebot",
        seconds_between_requests=policy.seconds_between_requests,
        seconds_between_writes=policy.seconds_between_writes,
    )
    owner, name = repository.split("/")

    def call() -> AppIdentity:
        installation = integration.get_repo_installation(owner, name)
        token = integration.get_access_token(installation.id, permissions).token
        return AppIdentity(token, f"{integration.get_app().slug}[bot]")

    try:
        return call()
    except Exception as error:  # classified: GitHubError or re-raised as-is
        failure = _classify(error)
        if failure is None:
            raise
        raise GitHubError(
            f"could not mint the GitHub App's installation token for {repository}: "
            f"{failure.text} (is the App installed on the repository, with these permissions: "
            f"{', '.join(f'{k}: {v}' for k, v in sorted(permissions.items()))}?)"
        ) from None


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())[:200]
