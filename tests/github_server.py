"""A local fake GitHub REST server for integration tests: real PyGithub talks to it over HTTP.

Threaded HTTP on 127.0.0.1 that serves the endpoints stagebot uses with GitHub's response shapes
(pagination through ``Link`` headers included), records every request, and injects faults:

- ``5xx``: answer 502 before doing anything;
- ``5xx-after-write``: perform the request (a write really happens), then answer 502;
- ``403``: a secondary rate limit (403 with ``Retry-After`` and GitHub's message);
- ``429``: too many requests, with ``Retry-After``;
- ``timeout``: hold the answer longer than the client waits (no write);
- ``timeout-after-write``: perform the write, then hold the answer past the client's timeout.

Also the Actions side of the bot's flow: workflow runs, their artifacts (zip downloads answer
with a redirect to ``/_blobs/<id>``, outside the API, as GitHub's storage does; a fault
whose route is ``download_blob`` fails that second hop, and only such a fault does),
``workflow_dispatch`` (the run's title rendered from the workflow file's ``run-name``, unknown
inputs refused like GitHub), and a GitHub App (``add_app``): installation lookup, JWT-checked
installation tokens, and the App's login for the tokens it minted.

Serves under ``/api/v3`` by default, the way GitHub Enterprise Server does, so the client must
honour GITHUB_API_URL's path. Usage: ``with FakeGitHub() as gh: gh.url, gh.add_pull(...)``.
"""

from __future__ import annotations

import io
import itertools
import json
import re
import threading
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

FAULT_KINDS = ("5xx", "5xx-after-write", "403", "429", "404", "timeout", "timeout-after-write")
SECONDARY_RATE_LIMIT = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
)
WRITE_METHODS = ("POST", "PATCH", "PUT", "DELETE")


@dataclass
class Recorded:
    method: str
    path: str  # without the API prefix and the query
    route: str  # the route's name, e.g. "create_comment"
    query: dict[str, str]
    body: Any
    status: int
    fault: str | None
    authorization: str | None


@dataclass
class Fault:
    kind: str
    method: str | None = None
    route: str | None = None  # a route name; None: every route
    times: int = 1
    retry_after: str = "0"

    def matches(self, method: str, route: str) -> bool:
        return (self.method in (None, method)) and (self.route in (None, route))


@dataclass
class _EveryEndpoint:
    kinds: tuple[str, ...]
    first: int
    counts: dict[tuple[str, str], int] = field(default_factory=dict)


ROUTES: list[tuple[str, str, re.Pattern[str]]] = [
    (method, name, re.compile("^" + pattern + "$"))
    for method, name, pattern in (
        ("GET", "get_repo", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"),
        ("GET", "get_pull", r"/repos/[^/]+/[^/]+/pulls/(?P<number>\d+)"),
        ("GET", "list_pull_files", r"/repos/[^/]+/[^/]+/pulls/(?P<number>\d+)/files"),
        ("GET", "list_pull_commits", r"/repos/[^/]+/[^/]+/pulls/(?P<number>\d+)/commits"),
        ("GET", "list_commits", r"/repos/[^/]+/[^/]+/commits"),
        ("GET", "get_issue", r"/repos/[^/]+/[^/]+/issues/(?P<number>\d+)"),
        ("GET", "list_timeline", r"/repos/[^/]+/[^/]+/issues/(?P<number>\d+)/timeline"),
        ("GET", "list_comments", r"/repos/[^/]+/[^/]+/issues/(?P<number>\d+)/comments"),
        ("POST", "create_comment", r"/repos/[^/]+/[^/]+/issues/(?P<number>\d+)/comments"),
        ("GET", "get_comment", r"/repos/[^/]+/[^/]+/issues/comments/(?P<id>\d+)"),
        ("PATCH", "edit_comment", r"/repos/[^/]+/[^/]+/issues/comments/(?P<id>\d+)"),
        ("POST", "create_reaction", r"/repos/[^/]+/[^/]+/issues/comments/(?P<id>\d+)/reactions"),
        (
            "GET",
            "get_permission",
            r"/repos/[^/]+/[^/]+/collaborators/(?P<login>[^/]+)/permission",
        ),
        ("POST", "create_status", r"/repos/[^/]+/[^/]+/statuses/(?P<sha>[0-9a-f]+)"),
        ("GET", "list_statuses", r"/repos/[^/]+/[^/]+/commits/(?P<sha>[0-9a-f]+)/statuses"),
        ("GET", "list_statuses", r"/repos/[^/]+/[^/]+/statuses/(?P<sha>[0-9a-f]+)"),
        ("GET", "list_runs", r"/repos/[^/]+/[^/]+/actions/runs"),
        ("GET", "list_workflow_runs", r"/repos/[^/]+/[^/]+/actions/workflows/(?P<wf>[^/]+)/runs"),
        ("GET", "compare", r"/repos/[^/]+/[^/]+/compare/(?P<base>[0-9a-f]+)\.{3}(?P<head>\w+)"),
        ("POST", "cancel_run", r"/repos/[^/]+/[^/]+/actions/runs/(?P<id>\d+)/cancel"),
        ("GET", "list_jobs", r"/repos/[^/]+/[^/]+/actions/runs/(?P<id>\d+)/jobs"),
        ("GET", "get_run", r"/repos/[^/]+/[^/]+/actions/runs/(?P<id>\d+)"),
        ("GET", "list_run_artifacts", r"/repos/[^/]+/[^/]+/actions/runs/(?P<id>\d+)/artifacts"),
        ("GET", "list_artifacts", r"/repos/[^/]+/[^/]+/actions/artifacts"),
        ("GET", "download_artifact", r"/repos/[^/]+/[^/]+/actions/artifacts/(?P<id>\d+)/zip"),
        ("POST", "dispatch", r"/repos/[^/]+/[^/]+/actions/workflows/(?P<wf>[^/]+)/dispatches"),
        ("GET", "get_installation", r"/repos/[^/]+/[^/]+/installation"),
        ("POST", "create_token", r"/app/installations/(?P<id>\d+)/access_tokens"),
        ("GET", "get_app", r"/app"),
        # the repository's settings, read by `bot doctor`
        ("GET", "get_contents", r"/repos/[^/]+/[^/]+/contents/(?P<path>.+)"),
        ("GET", "get_branch", r"/repos/[^/]+/[^/]+/branches/(?P<branch>[^/]+)"),
        (
            "GET",
            "get_required_status_checks",
            r"/repos/[^/]+/[^/]+/branches/(?P<branch>[^/]+)/protection/required_status_checks",
        ),
        ("GET", "get_branch_rules", r"/repos/[^/]+/[^/]+/rules/branches/(?P<branch>[^/]+)"),
        ("GET", "list_runners", r"/repos/[^/]+/[^/]+/actions/runners"),
        ("GET", "get_workflow_permissions", r"/repos/[^/]+/[^/]+/actions/permissions/workflow"),
        (
            "GET",
            "get_fork_approval",
            r"/repos/[^/]+/[^/]+/actions/permissions/fork-pr-contributor-approval",
        ),
    )
]
WORKFLOWS = Path(__file__).resolve().parents[1] / ".github" / "workflows"
INPUT = re.compile(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}")


class FakeGitHub:
    """The fake server's state, faults and request log; start it with ``with``."""

    def __init__(self, repo: str = "octo-org/octo-repo", prefix: str = "/api/v3") -> None:
        self.repo = repo
        self.prefix = prefix
        self.lock = threading.RLock()
        self.requests: list[Recorded] = []
        self.faults: list[Fault] = []
        self.every: _EveryEndpoint | None = None
        self.hold_s = 2.0  # how long a "timeout" fault holds its answer
        self.pulls: dict[int, dict[str, Any]] = {}
        self.files: dict[int, list[str]] = {}
        # PR -> its commits' SHAs, oldest first (default: the head); GitHub lists the first 250
        self.commits: dict[int, list[str]] = {}
        self.main_commits: list[str] = []  # the default branch's commits, newest first
        self.timeline: dict[int, list[dict[str, Any]]] = {}  # PR -> events, oldest first
        self._clock = itertools.count(1)
        self.comments: dict[int, dict[str, Any]] = {}
        self.reactions: list[dict[str, Any]] = []
        self.statuses: dict[str, list[dict[str, Any]]] = {}
        self.jobs: dict[int, list[dict[str, Any]]] = {}
        self.permissions: dict[str, tuple[str, str]] = {}
        self.runs: dict[int, dict[str, Any]] = {}
        self.diffs: dict[tuple[str, str], list[str]] = {}  # (base, head) -> changed files
        self.hooks: list[tuple[str, Callable[[], None]]] = []  # (route, run once after it)
        self.artifacts: dict[int, dict[str, Any]] = {}
        self.blobs: dict[int, bytes] = {}
        self.blob_auth: list[str | None] = []  # the Authorization header of each blob fetch
        self.dispatches: list[dict[str, Any]] = []
        self.run_details = True  # False: a GitHub whose dispatch API returns no run id
        # False: a cancel is accepted (202) but the run goes on until the test completes it, as
        # GitHub's runners take a while to stop; the runs asked to cancel are listed
        self.cancel_at_once = True
        self.cancel_requested: list[int] = []
        self.app: dict[str, Any] | None = None
        self.tokens: dict[str, str] = {}  # installation token -> the App's login
        # The repository's settings `bot doctor` reads; GitHub's defaults until a test sets them.
        self.branch_files: dict[str, dict[str, str]] = {}  # branch -> {path: text}
        self.branch_rules: dict[str, list[dict[str, Any]]] = {}  # branch -> rules applying
        self.protected_contexts: dict[str, list[str]] = {}  # branch -> classic required checks
        self.runners: list[dict[str, Any]] = []
        self.default_workflow_permissions = "write"
        self.fork_approval_policy = "first_time_contributors"
        self._ids = itertools.count(1001)
        self._server: ThreadingHTTPServer | None = None

    # ---- lifecycle
    def __enter__(self) -> FakeGitHub:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    @property
    def base(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        """What GITHUB_API_URL is set to."""
        return self.base + self.prefix

    def api(self, path: str) -> str:
        return f"{self.url}/repos/{self.repo}{path}"

    # ---- state set-up
    def add_pull(
        self,
        number: int,
        *,
        head_sha: str,
        author: str = "contributor",
        labels: tuple[str, ...] = (),
        files: tuple[str, ...] = ("README.md",),
        fork: bool = False,
    ) -> None:
        owner = author if fork else self.repo.split("/")[0]
        head_repo = f"{owner}/{self.repo.split('/')[1]}"
        self.pulls[number] = {
            "url": self.api(f"/pulls/{number}"),
            "id": 9000 + number,
            "number": number,
            "state": "open",
            "title": f"PR {number}",
            "html_url": f"{self.base}/{self.repo}/pull/{number}",
            "issue_url": self.api(f"/issues/{number}"),
            "comments_url": self.api(f"/issues/{number}/comments"),
            "user": _user(author),
            "labels": [{"id": i, "name": name} for i, name in enumerate(labels)],
            "head": {
                "ref": "feature",
                "sha": head_sha,
                "repo": {"full_name": head_repo, "fork": fork},
            },
            "base": {"ref": "main", "sha": "0" * 40, "repo": {"full_name": self.repo}},
        }
        self.files[number] = list(files)

    def push(self, number: int, sha: str, *, force: bool = False) -> None:
        """The PR's author pushes ``sha`` on top (or force-pushes it: the old commits go)."""
        with self.lock:
            pull = self.pulls[number]
            old = self.commits.get(number) or [pull["head"]["sha"]]
            self.commits[number] = [sha] if force else [*old, sha]
            pull["head"]["sha"] = sha
            self._event(number, "head_ref_force_pushed" if force else "committed", None, sha=sha)

    def label(self, number: int, name: str, actor: str, *, remove: bool = False) -> None:
        """``actor`` adds (or removes) a label: the label list and a timeline event."""
        with self.lock:
            labels = self.pulls[number]["labels"]
            labels[:] = [label for label in labels if label["name"] != name]
            if not remove:
                labels.append({"id": len(labels) + 100, "name": name})
            self._event(number, "unlabeled" if remove else "labeled", actor, label={"name": name})

    def _event(self, number: int, kind: str, actor: str | None, **extra: Any) -> None:
        tick = next(self._clock)
        event = {
            "id": extra.pop("id", None) or next(self._ids),
            "event": kind,
            "actor": _user(actor) if actor else None,
            "created_at": f"2026-01-01T01:{tick // 60:02d}:{tick % 60:02d}Z",
            **extra,
        }
        self.timeline.setdefault(number, []).append(event)

    def grant(self, login: str, role_name: str) -> None:
        """Give ``login`` a repository role; ``permission`` folds maintain/triage like GitHub."""
        legacy = {"maintain": "write", "triage": "read"}.get(role_name, role_name)
        self.permissions[login] = (legacy, role_name)

    def add_comment(
        self, number: int, body: str, author: str = "someone", comment_id: int | None = None
    ) -> dict[str, Any]:
        with self.lock:
            return self._new_comment(number, body, _user(author), comment_id)

    def add_run(
        self,
        run_number: int,
        status: str = "in_progress",
        run_id: int | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """A workflow run (default: a bot.yml run on main, started by a comment); ``fields``
        override any of its keys (path, event, head_branch, head_repo, display_title, …)."""
        run_id = run_id or 50000 + run_number
        head_repo = fields.pop("head_repo", self.repo)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # GitHub's clock is real time
        self.runs[run_id] = {
            "id": run_id,
            "run_number": run_number,
            "status": status,
            "conclusion": None,
            "event": "issue_comment",
            "path": ".github/workflows/bot.yml",
            "name": "bot",
            "head_branch": "main",
            "head_sha": "0" * 40,
            "display_title": "bot",
            "head_repository": {"full_name": head_repo},
            "repository": {"full_name": self.repo},
            "url": self.api(f"/actions/runs/{run_id}"),
            "html_url": f"{self.base}/{self.repo}/actions/runs/{run_id}",
            "cancel_url": self.api(f"/actions/runs/{run_id}/cancel"),
            "artifacts_url": self.api(f"/actions/runs/{run_id}/artifacts"),
            "created_at": now,
            "run_started_at": now,
            **fields,
        }
        return self.runs[run_id]

    def add_job(self, run_id: int, name: str) -> dict[str, Any]:
        """A job of run ``run_id`` (a stage job is named after its stage)."""
        job_id = 70000 + sum(len(jobs) for jobs in self.jobs.values())
        job = {
            "id": job_id,
            "run_id": run_id,
            "name": name,
            "status": "completed",
            "conclusion": "failure",
            "url": self.api(f"/actions/jobs/{job_id}"),
            "html_url": f"{self.base}/{self.repo}/actions/runs/{run_id}/job/{job_id}",
        }
        self.jobs.setdefault(run_id, []).append(job)
        return job

    def after(self, route: str, action: Callable[[], None]) -> None:
        """Run ``action`` (e.g. another client's write) once, right after the next request of
        ``route`` is handled and before its answer is sent: interleaves two clients."""
        self.hooks.append((route, action))

    def add_stage_run(
        self, pipeline: int, status: str = "in_progress", pr: int | None = None, plan_run: int = 1
    ) -> dict[str, Any]:
        """A run of stage.yml as the bot dispatches it for ``pipeline`` (its title names it)."""
        key = f"pr-{pr}" if pr else "main"
        return self.add_run(
            pipeline,
            status=status,
            run_id=80000 + pipeline,
            path=".github/workflows/stage.yml",
            name="stage",
            event="workflow_dispatch",
            head_branch="stagebot-stage",
            display_title=f"stagebot {key} pipeline {pipeline} plan-run {plan_run}",
        )

    def add_artifact(
        self, run_id: int, name: str, files: dict[str, bytes], expired: bool = False
    ) -> dict[str, Any]:
        """An artifact of run ``run_id`` holding ``files`` (path -> bytes), zipped."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for path, data in files.items():
                archive.writestr(path, data)
        with self.lock:
            artifact_id = next(self._ids)
            run = self.runs.get(run_id, {})
            self.blobs[artifact_id] = buffer.getvalue()
            self.artifacts[artifact_id] = {
                "id": artifact_id,
                "node_id": f"A_{artifact_id}",
                "name": name,
                "size_in_bytes": len(self.blobs[artifact_id]),
                "url": self.api(f"/actions/artifacts/{artifact_id}"),
                "archive_download_url": self.api(f"/actions/artifacts/{artifact_id}/zip"),
                "expired": expired,
                "created_at": "2026-01-01T00:00:00Z",
                "expires_at": "2026-04-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
                "workflow_run": {
                    "id": run_id,
                    "repository_id": 1,
                    "head_repository_id": 1,
                    "head_branch": run.get("head_branch"),
                    "head_sha": run.get("head_sha"),
                },
            }
            return self.artifacts[artifact_id]

    def add_app(self, app_id: int, slug: str, public_key_pem: bytes, installation_id: int = 77):
        """A GitHub App installed on the repository; its JWTs are checked with the key."""
        self.app = {
            "id": app_id,
            "slug": slug,
            "key": public_key_pem,
            "installation": installation_id,
        }

    # ---- faults
    def fail(self, kind: str, *, method=None, route=None, times=1, retry_after="0") -> None:
        assert kind in FAULT_KINDS, kind
        self.faults.append(Fault(kind, method, route, times, retry_after))

    def fail_every_endpoint(self, first: int, kinds: tuple[str, ...]) -> None:
        """Every (method, route) fails its first ``first`` requests, with ``kinds`` in turn;
        an "-after-write" kind falls back to its plain form on a read."""
        for kind in kinds:
            assert kind in FAULT_KINDS, kind
        self.every = _EveryEndpoint(kinds, first)

    def _take_fault(self, method: str, route: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.times > 0 and fault.matches(method, route):
                    fault.times -= 1
                    return fault
            if self.every is not None:
                key = (method, route)
                seen = self.every.counts.get(key, 0)
                self.every.counts[key] = seen + 1
                if seen < self.every.first:
                    kind = self.every.kinds[seen % len(self.every.kinds)]
                    if method not in WRITE_METHODS:
                        kind = kind.removesuffix("-after-write")
                    return Fault(kind)
        return None

    # ---- queries for assertions
    def calls(self, route: str, *, ok_only: bool = False) -> list[Recorded]:
        return [r for r in self.requests if r.route == route and (not ok_only or r.status < 300)]

    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method in WRITE_METHODS]

    def bot_comments(self, number: int, login: str = "github-actions[bot]") -> list[dict]:
        return [
            c
            for c in self.comments.values()
            if c["issue"] == number and c["user"]["login"] == login
        ]

    def post_status(self, sha: str, state: str, context: str, description: str) -> None:
        """A status written by another client (another job, a person)."""
        with self.lock:
            body = {"state": state, "context": context, "description": description}
            self.handle("POST", "create_status", {"sha": sha}, {}, body, None)

    def latest_status(self, sha: str, context: str) -> dict[str, Any] | None:
        mine = [s for s in self.statuses.get(sha, []) if s["context"] == context]
        return mine[-1] if mine else None

    # ---- handlers (called with the lock held); return (status, json)
    def _new_comment(
        self, number: int, body: str, user: dict[str, Any], comment_id: int | None = None
    ) -> dict[str, Any]:
        comment_id = comment_id or next(self._ids)
        comment = {
            "id": comment_id,
            "issue": number,
            "url": self.api(f"/issues/comments/{comment_id}"),
            "html_url": f"{self.base}/{self.repo}/pull/{number}#issuecomment-{comment_id}",
            "issue_url": self.api(f"/issues/{number}"),
            "body": body,
            "user": user,
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
        self.comments[comment_id] = comment
        self._event(number, "commented", user["login"], id=comment_id)
        return comment

    def handle(self, method: str, route: str, params: dict[str, str], query, body, auth):
        if route == "get_repo":
            return 200, {
                "id": 1,
                "full_name": self.repo,
                "name": self.repo.split("/")[1],
                "url": self.api(""),
                "default_branch": "main",
            }
        if route == "get_pull":
            pull = self.pulls.get(int(params["number"]))
            return (200, pull) if pull else _not_found()
        if route == "list_pull_files":
            number = int(params["number"])
            if number not in self.pulls:
                return _not_found()
            return 200, [
                {"sha": "f" * 40, "filename": name, "status": "modified"}
                for name in self.files[number]
            ]
        if route == "list_timeline":
            return 200, list(self.timeline.get(int(params["number"]), []))
        if route == "list_pull_commits":
            number = int(params["number"])
            if number not in self.pulls:
                return _not_found()
            shas = (self.commits.get(number) or [self.pulls[number]["head"]["sha"]])[:250]
            return 200, [{"sha": sha, "url": self.api(f"/commits/{sha}")} for sha in shas]
        if route == "list_commits":
            return 200, [
                {"sha": sha, "url": self.api(f"/commits/{sha}")} for sha in self.main_commits
            ]
        if route == "get_issue":
            number = int(params["number"])
            if number in self.pulls:
                pull = self.pulls[number]
                return 200, {
                    "url": pull["issue_url"],
                    "number": number,
                    "pull_request": {"url": pull["url"]},
                    "labels": pull["labels"],
                }
            return _not_found()
        if route == "list_comments":
            number = int(params["number"])
            return 200, [_public(c) for c in self.comments.values() if c["issue"] == number]
        if route == "create_comment":
            number = int(params["number"])
            if number not in self.pulls:
                return _not_found()
            if not isinstance(body, dict) or not isinstance(body.get("body"), str):
                return 422, {"message": "Validation Failed"}
            if len(body["body"]) > 65536:
                return 422, {"message": "Body is too long (maximum is 65536 characters)"}
            return 201, _public(
                self._new_comment(number, body["body"], _user(_login(auth, self.tokens)))
            )
        if route in ("get_comment", "edit_comment"):
            comment = self.comments.get(int(params["id"]))
            if comment is None:
                return _not_found()
            if route == "edit_comment":
                if len(body.get("body", "")) > 65536:
                    return 422, {"message": "Body is too long (maximum is 65536 characters)"}
                comment["body"] = body["body"]
                comment["updated_at"] = "2026-01-01T00:01:00Z"
            return 200, _public(comment)
        if route == "create_reaction":
            comment_id = int(params["id"])
            if comment_id not in self.comments:
                return _not_found()
            content = body.get("content")
            for reaction in self.reactions:
                if reaction["comment_id"] == comment_id and reaction["content"] == content:
                    return 200, reaction  # GitHub: 200 when the reaction already exists
            reaction = {
                "id": next(self._ids),
                "comment_id": comment_id,
                "content": content,
                "user": _user(_login(auth, self.tokens)),
            }
            self.reactions.append(reaction)
            return 201, reaction
        if route == "get_permission":
            login = params["login"]
            if login not in self.permissions:
                return 200, {"permission": "read", "role_name": "read", "user": _user(login)}
            permission, role = self.permissions[login]
            return 200, {"permission": permission, "role_name": role, "user": _user(login)}
        if route == "create_status":
            state = body.get("state")
            if state not in ("error", "failure", "pending", "success"):
                return 422, {"message": "Validation Failed: state"}
            if len(body.get("description") or "") > 140:
                return 422, {"message": "Validation Failed: description is too long"}
            status = {
                "id": next(self._ids),
                "url": self.api(f"/statuses/{params['sha']}"),
                "state": state,
                "description": body.get("description"),
                "target_url": body.get("target_url"),
                "context": body.get("context", "default"),
                "creator": _user(_login(auth, self.tokens)),
            }
            self.statuses.setdefault(params["sha"], []).append(status)
            return 201, status
        if route == "list_statuses":
            return 200, list(reversed(self.statuses.get(params["sha"], [])))
        if route in ("list_runs", "list_workflow_runs"):
            runs = [
                run
                for run in sorted(self.runs.values(), key=lambda r: r["id"], reverse=True)
                if query.get("status") in (None, run["status"])
                and query.get("event") in (None, run["event"])
                and query.get("branch") in (None, run["head_branch"])
                and _created_within(run["created_at"], query.get("created"))
                and (route == "list_runs" or run["path"].endswith("/" + params["wf"]))
            ]
            return 200, {"total_count": len(runs), "workflow_runs": runs}
        if route == "compare":
            files = self.diffs.get((params["base"], params["head"]))
            if files is None:
                return _not_found()
            return 200, {
                "status": "ahead",
                "ahead_by": 1,
                "behind_by": 0,
                "total_commits": 1,
                "commits": [],
                "files": [{"sha": "e" * 40, "filename": f, "status": "modified"} for f in files],
            }
        if route == "list_jobs":
            jobs = self.jobs.get(int(params["id"]), [])
            return 200, {"total_count": len(jobs), "jobs": jobs}
        if route == "cancel_run":
            run = self.runs.get(int(params["id"]))
            if run is None:
                return _not_found()
            if run["status"] == "completed":
                return 409, {"message": "Cannot cancel a workflow run that is completed."}
            self.cancel_requested.append(run["id"])
            if self.cancel_at_once:
                run["status"], run["conclusion"] = "completed", "cancelled"
            return 202, {}
        if route == "get_run":
            run = self.runs.get(int(params["id"]))
            return (200, run) if run else _not_found()
        if route in ("list_run_artifacts", "list_artifacts"):
            if route == "list_run_artifacts" and int(params["id"]) not in self.runs:
                return _not_found()
            found = [
                a
                for a in sorted(self.artifacts.values(), key=lambda a: -a["id"])
                if query.get("name") in (None, a["name"])
                and (route == "list_artifacts" or a["workflow_run"]["id"] == int(params["id"]))
            ]
            return 200, {"total_count": len(found), "artifacts": found}
        if route == "download_artifact":
            artifact = self.artifacts.get(int(params["id"]))
            if artifact is None:
                return _not_found()
            if artifact["expired"]:
                return 410, {"message": "Artifact has expired"}
            return 302, {"Location": f"{self.base}/_blobs/{artifact['id']}"}
        if route == "dispatch":
            return self._dispatch(params["wf"], body or {}, auth)
        if route == "get_installation":
            if self._app_claims(auth) is None:
                return 401, {"message": "A JSON web token could not be decoded"}
            return 200, {
                "id": self.app["installation"],
                "app_id": self.app["id"],
                "permissions": self.app.get("permissions", {}),
            }
        if route == "create_token":
            if self._app_claims(auth) is None:
                return 401, {"message": "A JSON web token could not be decoded"}
            if int(params["id"]) != self.app["installation"]:
                return _not_found()
            token = f"ghs_installation_{next(self._ids)}"
            self.tokens[token] = f"{self.app['slug']}[bot]"
            permissions = (body or {}).get("permissions") or {}
            return 201, {
                "token": token,
                "expires_at": "2099-01-01T00:00:00Z",
                "permissions": permissions,
                "repository_selection": "selected",
            }
        if route == "get_app":
            if self._app_claims(auth) is None:
                return 401, {"message": "A JSON web token could not be decoded"}
            return 200, {"id": self.app["id"], "slug": self.app["slug"], "name": self.app["slug"]}
        return self._settings(route, params, query)

    def _settings(self, route: str, params: dict[str, str], query: dict[str, str]):
        """The repository settings `bot doctor` reads, in GitHub's shapes."""
        import base64

        if route == "get_contents":
            text = self.branch_files.get(query.get("ref", "main"), {}).get(params["path"])
            if text is None:
                return _not_found()
            content = base64.b64encode(text.encode()).decode()
            return 200, {
                "type": "file",
                "path": params["path"],
                "encoding": "base64",
                "content": content,
                "sha": "0" * 40,
            }
        if route == "get_branch":
            branch = params["branch"]
            if branch not in self.branch_files:
                return _not_found()
            return 200, {
                "name": branch,
                "commit": {"sha": "c" * 40},
                "protected": branch in self.protected_contexts,
            }
        if route == "get_branch_rules":
            return 200, list(self.branch_rules.get(params["branch"], []))
        if route == "get_required_status_checks":
            contexts = self.protected_contexts.get(params["branch"])
            if contexts is None:
                return 404, {"message": "Branch not protected"}
            return 200, {
                "strict": False,
                "contexts": list(contexts),
                "checks": [{"context": c, "app_id": None} for c in contexts],
            }
        if route == "list_runners":
            return 200, {"total_count": len(self.runners), "runners": list(self.runners)}
        if route == "get_workflow_permissions":
            return 200, {
                "default_workflow_permissions": self.default_workflow_permissions,
                "can_approve_pull_request_reviews": False,
            }
        if route == "get_fork_approval":
            return 200, {"approval_policy": self.fork_approval_policy}
        return _not_found()

    def add_runner(self, name: str, labels: list[str], status: str = "online") -> None:
        self.runners.append(
            {
                "id": len(self.runners) + 1,
                "name": name,
                "os": "linux",
                "status": status,
                "busy": False,
                "labels": [{"name": label, "type": "custom"} for label in labels],
            }
        )

    def _app_claims(self, auth: str | None) -> dict[str, Any] | None:
        """The JWT's claims when it is signed by the App's key and names the App; else None."""
        import jwt

        if self.app is None or not auth or not auth.startswith("Bearer "):
            return None
        try:
            claims = jwt.decode(auth[7:], self.app["key"], algorithms=["RS256"])
        except jwt.PyJWTError:
            return None
        return claims if str(claims.get("iss")) == str(self.app["id"]) else None

    def _dispatch(self, workflow: str, body: dict[str, Any], auth: str | None):
        """workflow_dispatch: the run's title is the workflow file's run-name, rendered."""
        path = WORKFLOWS / workflow
        if not path.is_file():
            return _not_found()
        import yaml

        spec = yaml.safe_load(path.read_text())
        declared = (spec.get(True) or spec.get("on"))["workflow_dispatch"]["inputs"]
        inputs = body.get("inputs") or {}
        unexpected = sorted(set(inputs) - set(declared))
        missing = sorted(k for k, v in declared.items() if v.get("required") and k not in inputs)
        if unexpected or missing or not isinstance(body.get("ref"), str):
            return 422, {"message": f"Unexpected inputs {unexpected}, missing {missing}"}
        title = INPUT.sub(lambda m: str(inputs.get(m[1], "")), spec.get("run-name", spec["name"]))
        run_id = next(self._ids) + 70000
        self.add_run(
            run_id - 70000,
            status="queued",
            run_id=run_id,
            path=f".github/workflows/{workflow}",
            name=spec["name"],
            event="workflow_dispatch",
            head_branch=body["ref"],
            display_title=title,
            actor={"login": _login(auth, self.tokens)},
        )
        self.dispatches.append({"workflow": workflow, "run_id": run_id, **body})
        if not body.get("return_run_details") or not self.run_details:
            return 204, None
        run = self.runs[run_id]
        return 200, {"workflow_run_id": run_id, "run_url": run["url"], "html_url": run["html_url"]}


def _user(login: str) -> dict[str, Any]:
    bot = login.endswith("[bot]")
    return {
        "login": login,
        "id": user_id(login),
        "type": "Bot" if bot else "User",
        "url": f"https://api.example/users/{login}",
    }


def user_id(login: str) -> int:
    """A login's stable numeric id on this fake server (GitHub's ids never change)."""
    return zlib.crc32(login.encode()) % 10**6 + 1


def _login(auth: str | None, tokens: dict[str, str] | None = None) -> str:
    """The token decides who writes: ``token user:LOGIN``, an App's installation token (its
    ``slug[bot]``), or anything else -> the Actions bot."""
    if auth and " user:" in auth:
        return auth.split(" user:", 1)[1]
    token = (auth or "").split(" ", 1)[-1]
    if tokens and token in tokens:
        return tokens[token]
    return "github-actions[bot]"


def _created_within(created: str, wanted: str | None) -> bool:
    """GitHub's ``created`` filter of a listing of runs, in its search syntax: ``>=T``, ``>T``,
    ``<=T``, ``<T``, ``A..B`` or a bare ``T`` (ISO 8601 UTC timestamps compare as text)."""
    if wanted is None:
        return True
    if ".." in wanted:
        low, high = wanted.split("..", 1)
        return (low == "*" or created >= low) and (high == "*" or created <= high)
    for op, test in (
        (">=", str.__ge__),
        ("<=", str.__le__),
        (">", str.__gt__),
        ("<", str.__lt__),
    ):
        if wanted.startswith(op):
            return test(created, wanted[len(op) :])
    return created.startswith(wanted)


def _public(comment: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in comment.items() if k != "issue"}


def _not_found() -> tuple[int, dict[str, str]]:
    return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeGitHub
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # one answer, no delayed-ACK stalls on keep-alive

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def _serve(self, method: str) -> None:
        fake = self.fake
        split = urlsplit(self.path)
        path = split.path
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        auth = self.headers.get("Authorization")
        if method == "GET" and path.startswith("/_blobs/"):  # artifact storage, not the API
            return self._serve_blob(path, auth)
        if not path.startswith(fake.prefix + "/"):
            return self._send(404, {"message": "Not Found"})
        path = path[len(fake.prefix) :]
        route, params = "unknown", {}
        for route_method, name, pattern in ROUTES:
            match = pattern.match(path)
            if route_method == method and match:
                route, params = name, match.groupdict()
                break
        fault = fake._take_fault(method, route)
        kind = fault.kind if fault else None
        record = Recorded(method, path, route, query, body, 0, kind, auth)
        with fake.lock:
            fake.requests.append(record)
        if kind == "5xx":
            record.status = 502
            return self._send(502, {"message": "Server Error"})
        if kind in ("403", "429"):
            record.status = int(kind)
            message = SECONDARY_RATE_LIMIT if kind == "403" else "Too Many Requests"
            return self._send(int(kind), {"message": message}, {"Retry-After": fault.retry_after})
        if kind == "404":  # e.g. a commit GitHub does not know
            record.status = 404
            return self._send(404, {"message": "Not Found"})
        if kind == "timeout":
            time.sleep(fake.hold_s)
            record.status = 504
            return self._send(504, {"message": "held past the client's timeout"})
        with fake.lock:
            status, payload = fake.handle(method, route, params, query, body, auth)
            hook = next((h for h in fake.hooks if h[0] == route), None)
            if hook is not None:
                fake.hooks.remove(hook)
                hook[1]()
        if kind == "5xx-after-write":
            record.status = 502
            return self._send(502, {"message": "Server Error (after the write)"})
        if kind == "timeout-after-write":
            time.sleep(fake.hold_s)
            record.status = 504
            return self._send(504, {"message": "held past the client's timeout"})
        record.status = status
        if status == 302:
            return self._send(302, {}, {"Location": payload["Location"]})
        if status == 204:
            return self._send_bytes(b"", 204)
        if isinstance(payload, list):
            return self._send_page(status, payload, query)
        if isinstance(payload, dict) and "total_count" in payload:  # a listing, paged the same
            (key,) = [k for k in payload if k != "total_count"]
            chunk, headers = self._page(payload[key], query)
            return self._send(status, {**payload, key: chunk}, headers)
        return self._send(status, payload)

    def _serve_blob(self, path: str, auth: str | None) -> None:
        """The storage an artifact download is redirected to (route ``download_blob``): it
        fails only where a fault names that route (no fault for every route reaches it)."""
        fake = self.fake
        with fake.lock:
            fake.blob_auth.append(auth)
            blob = fake.blobs.get(int(path.rsplit("/", 1)[1] or 0))
            fault = next(
                (f for f in fake.faults if f.times > 0 and f.route == "download_blob"), None
            )
            if fault is not None:
                fault.times -= 1
            record = Recorded(
                "GET", path, "download_blob", {}, None, 0, fault.kind if fault else None, auth
            )
            fake.requests.append(record)
        if fault is not None and fault.kind in ("5xx", "5xx-after-write"):
            record.status = 502
            return self._send(502, {"message": "Server Error"})
        if fault is not None and fault.kind in ("403", "429"):
            record.status = int(fault.kind)
            return self._send(
                record.status, {"message": "Too Many Requests"}, {"Retry-After": fault.retry_after}
            )
        if fault is not None and fault.kind.startswith("timeout"):
            time.sleep(fake.hold_s)
            record.status = 504
            return self._send(504, {"message": "held past the client's timeout"})
        if fault is not None or blob is None:
            record.status = 404
            return self._send(404, {"message": "Not Found"})
        record.status = 200
        return self._send_bytes(blob)

    def _send_page(self, status: int, items: list, query: dict[str, str]) -> None:
        self._send(status, *self._page(items, query))

    def _page(self, items: list, query: dict[str, str]) -> tuple[list, dict[str, str]]:
        """The page ``query`` asks for (per_page: at most 100, as GitHub) and its Link header."""
        per_page = min(int(query.get("per_page", 30)), 100)
        page = int(query.get("page", 1))
        chunk = items[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(items):
            split = urlsplit(self.path)
            others = urlencode({k: v for k, v in query.items() if k not in ("page", "per_page")})
            nxt = f"{self.fake.base}{split.path}?{others + '&' if others else ''}"
            nxt += f"per_page={per_page}&page={page + 1}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        return chunk, headers

    def _send_bytes(self, data: bytes, status: int = 200) -> None:
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Type", "application/zip")
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if status != 204:
            self.wfile.write(data)

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout fault)
