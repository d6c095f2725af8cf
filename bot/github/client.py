"""``PyGithubApi``: the ``GitHubApi`` over PyGithub, and ``connect`` from the Actions variables.

PyGithub (``github``) is imported inside the methods: importing this module stays cheap, so
`bot parse` and `bot dry-run` never load it. Reads rely on PyGithub's own retry (``read_retry``);
writes and downloads go through ``retry.retried``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from stagebot.bot.github.actions_env import ActionsEnv
from stagebot.bot.github.data import (
    Artifact,
    Comment,
    GitHubError,
    Permission,
    PullRequest,
    RunInfo,
    SetupError,
    Status,
    TimelineEvent,
    check_reaction,
    check_status_state,
    fit_status_description,
)
from stagebot.bot.github.download import artifact_location, stream_from_storage
from stagebot.bot.github.retry import RetryPolicy, http_timeout, read, read_retry, retried


def connect(env: ActionsEnv, policy: RetryPolicy | None = None) -> PyGithubApi:
    if not env.token:
        raise SetupError(
            "GITHUB_TOKEN is not set: the bot needs a token to talk to "
            f"{env.api_url} (in Actions: env: GITHUB_TOKEN: ${{{{ github.token }}}})"
        )
    return PyGithubApi(env.api_url, env.repository, env.token, policy or RetryPolicy())


class PyGithubApi:
    """``GitHubApi`` over PyGithub, for github.com or a GitHub Enterprise ``api_url``."""

    def __init__(self, api_url: str, repository: str, token: str, policy: RetryPolicy) -> None:
        import github  # PyGithub, loaded when a client is made

        self.repository = repository
        self.policy = policy
        self._token = token  # artifact downloads go around PyGithub (a redirect to storage)
        self._api_url = api_url.rstrip("/")
        self._gh = github.Github(
            base_url=api_url,
            auth=github.Auth.Token(token),
            retry=read_retry(policy),
            timeout=http_timeout(policy),
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

        return read(f"get pull request {self.repository}#{number}", call)

    def changed_files(self, number: int) -> list[str]:
        return read(
            f"list the changed files of {self.repository}#{number}",
            lambda: [f.filename for f in self._repo.get_pull(number).get_files()],
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

        return read(f"list the timeline of {self.repository}#{number}", call)

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

        return read(f"get {login}'s permission on {self.repository}", call)

    def comments(self, number: int) -> list[Comment]:
        return read(
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
                    _as_dict,
                    self._gh.requester,
                    f"{self._repo.url}/actions/workflows/{workflow}/runs",
                    {"status": status},
                    list_item="workflow_runs",
                )
                runs += [_run_info(r) for r in listing]
            return runs

        return read(f"list the active runs of {workflow} in {self.repository}", call)

    def dispatched_runs(self, workflow: str, branch: str, since: str) -> list[RunInfo]:
        """The runs of ``workflow`` dispatched (workflow_dispatch) on ``branch`` and created at or
        after ``since`` (ISO 8601), 100 a page: one listing reads every stage run of a pipeline
        at once, where a request per run would cost N requests per look (GitHub answers at most
        1,000 runs to a filtered listing)."""

        def call() -> list[RunInfo]:
            import github

            listing = github.PaginatedList.PaginatedList(
                _as_dict,
                self._gh.requester,
                f"{self._repo.url}/actions/workflows/{workflow}/runs",
                {
                    "event": "workflow_dispatch",
                    "branch": branch,
                    "created": f">={since}",
                    "exclude_pull_requests": "true",
                },
                list_item="workflow_runs",
            )
            return [_run_info(r) for r in listing]

        return read(f"list the runs of {workflow} on {branch} since {since}", call)

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

        return read(f"list the jobs of run {run_id} in {self.repository}", call)

    def compare_files(self, base: str, head: str) -> list[str]:
        return read(
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

        return read(f"list the statuses of {sha[:7]} in {self.repository}", call)

    def default_branch(self) -> str:
        return read(
            f"get the default branch of {self.repository}", lambda: self._repo.default_branch
        )

    def workflow_run(self, run_id: int) -> RunInfo:
        def call() -> RunInfo:
            _, data = self._gh.requester.requestJsonAndCheck(
                "GET", f"{self._repo.url}/actions/runs/{run_id}"
            )
            return _run_info(data)

        return read(f"get workflow run {run_id} of {self.repository}", call)

    def run_artifacts(self, run_id: int) -> list[Artifact]:
        return self._artifacts(
            f"list the artifacts of workflow run {run_id}",
            f"{self._repo.url}/actions/runs/{run_id}/artifacts",
            {},
        )

    def branch_commits(self, branch: str, count: int) -> list[str]:
        """The SHAs of ``branch``'s newest ``count`` commits, newest first."""
        import itertools

        return read(
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

        return read(f"{what} in {self.repository}", call)

    def download_artifact(self, artifact_id: int, limit: int, dest: Path) -> None:
        """Stream the artifact's zip into the file ``dest`` (bot/github/download.py). Each hop
        (the API's redirect, then the storage) is retried on its own budget like every other
        read (5xx, 429 and secondary rate limits with Retry-After, dropped connections,
        timeouts), with the same bounded waits."""
        what = f"artifact {artifact_id} of {self.repository}"
        timeout = http_timeout(self.policy)
        location = retried(
            self.policy,
            f"get the storage address of {what}",
            lambda: artifact_location(
                self._api_url, self.repository, self._token, artifact_id, timeout
            ),
        )
        retried(
            self.policy,
            f"download {what} from its storage",
            lambda: stream_from_storage(location, artifact_id, limit, dest, timeout),
        )

    # ---- writes (retried here, with recovery after ambiguous failures)
    def create_comment(
        self, number: int, body: str, recover: Callable[[], Comment | None] | None = None
    ) -> Comment:
        return retried(
            self.policy,
            f"post a comment on {self.repository}#{number}",
            lambda: _comment(self._repo.get_issue(number).create_comment(body)),
            recover,
        )

    def edit_comment(self, comment_id: int, body: str) -> None:
        retried(
            self.policy,
            f"edit comment {comment_id} on {self.repository}",
            lambda: self._repo.get_issue(0).get_comment(comment_id).edit(body),
        )

    def react(self, comment_id: int, content: str) -> None:
        check_reaction(content)
        retried(
            self.policy,
            f"react {content} to comment {comment_id} on {self.repository}",
            lambda: self._repo.get_issue(0).get_comment(comment_id).create_reaction(content),
        )

    def set_status(
        self, sha: str, state: str, context: str, description: str, target_url: str | None
    ) -> None:
        check_status_state(state)
        description = fit_status_description(description)

        def call() -> None:
            extra = {"target_url": target_url} if target_url else {}
            self._repo.get_commit(sha).create_status(
                state, description=description, context=context, **extra
            )

        retried(self.policy, f"set the {context!r} status of {sha[:7]} to {state}", call)

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

        return retried(self.policy, f"cancel workflow run {run_id} in {self.repository}", call)

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

        return retried(
            self.policy, f"dispatch {workflow} on {ref} in {self.repository}", call, recover
        )


def _as_dict(requester: Any, headers: Any, attributes: dict[str, Any]) -> dict[str, Any]:
    """A listed item as GitHub sent it. PyGithub's lazy objects would GET each item again when
    their ``raw_data`` is read: a listing of N runs would cost N + 1 requests."""
    return attributes


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
        created_at=str(data.get("created_at") or ""),
        started_at=str(data.get("run_started_at") or ""),
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
