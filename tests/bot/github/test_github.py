"""The GitHub adapter: real PyGithub against the local fake REST server, faults injected."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest
from github_server import FakeGitHub

import stagebot.bot.github as package
from stagebot.bot.github import (
    ActionsEnv,
    GitHubError,
    Permission,
    PyGithubApi,
    RetryPolicy,
    SetupError,
    connect,
)

SHA = "a" * 40


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def gh():
    with FakeGitHub() as server:
        server.add_pull(7, head_sha=SHA, labels=("ci-approved",), files=("a.py", "b/c.py"))
        yield server


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def api_for(gh: FakeGitHub, sleeps=None, **policy) -> PyGithubApi:
    values = dict(
        backoff_base=0.001,
        secondary_rate_wait=0.001,
        seconds_between_requests=0,
        seconds_between_writes=0,
        timeout=1,
    )
    if sleeps is not None:
        values["sleep"] = sleeps
    values.update(policy)
    return PyGithubApi(gh.url, gh.repo, "ghs_test", RetryPolicy(**values))


# ---------------------------------------------------------------- the calls, fault-free


def test_reads_map_github_shapes_to_plain_data(gh) -> None:
    gh.grant("maint", "maintain")
    api = api_for(gh)
    pull = api.pull(7)
    assert (pull.number, pull.head_sha, pull.author, pull.labels) == (
        7,
        SHA,
        "contributor",
        ("ci-approved",),
    )
    assert not pull.fork and pull.base_ref == "main"
    assert api.changed_files(7) == ["a.py", "b/c.py"]
    assert api.permission("maint") == Permission("maintain", "write")


def test_fork_pull_is_recognised(gh) -> None:
    gh.add_pull(9, head_sha=SHA, author="outsider", fork=True)
    pull = api_for(gh).pull(9)
    assert pull.fork and pull.head_repo == "outsider/octo-repo"


def test_enterprise_api_prefix_is_honoured(gh) -> None:
    api_for(gh).pull(7)
    assert gh.requests[-1].path == "/repos/octo-org/octo-repo/pulls/7"  # served under /api/v3


def test_writes_and_token(gh) -> None:
    api = api_for(gh)
    comment = api.create_comment(7, "hello")
    api.edit_comment(comment.id, "hello again")
    api.react(comment.id, "eyes")
    api.set_status(SHA, "pending", "stagebot", "x" * 300, "https://ci/run/1")
    assert gh.comments[comment.id]["body"] == "hello again"
    assert [r["content"] for r in gh.reactions] == ["eyes"]
    status = gh.latest_status(SHA, "stagebot")
    assert status["state"] == "pending" and len(status["description"]) == 140
    assert all(r.authorization == "token ghs_test" for r in gh.requests)


def test_pagination_is_followed(gh) -> None:
    for i in range(230):
        gh.add_comment(7, f"comment {i}")
    bodies = [c.body for c in api_for(gh).comments(7)]
    assert len(bodies) == 230 and bodies[-1] == "comment 229"
    assert len(gh.calls("list_comments")) == 3


def test_permission_of_an_unknown_user_is_none(gh) -> None:
    gh.fail("5xx", route="get_permission", times=0)  # no fault; the route 404s on bad logins
    gh.permissions.clear()
    assert api_for(gh).permission("nobody").level == "read"  # public repo: everyone reads


def test_active_runs_and_cancel(gh) -> None:
    gh.add_run(3)
    gh.add_run(4, status="queued")
    gh.add_run(2, status="completed")
    api = api_for(gh)
    assert sorted(run.id for run in api.active_runs("bot.yml")) == [50003, 50004]
    assert api.cancel_run(50003) is True
    assert api.cancel_run(50003) is False  # already finished: GitHub answers 409


@pytest.mark.parametrize(
    ("role_name", "permission", "level"),
    [
        ("admin", "admin", "admin"),
        ("maintain", "write", "maintain"),  # role_name keeps what permission folds
        ("triage", "read", "triage"),
        ("security-reviewer", "write", "write"),  # a custom role counts as its base
        ("", "none", "none"),
    ],
)
def test_permission_levels(role_name: str, permission: str, level: str) -> None:
    assert Permission(role_name or "none", permission).level == level


# ---------------------------------------------------------------- transient faults


@pytest.mark.parametrize("kind", ["5xx", "403", "429"])
def test_reads_retry_transient_failures(gh, sleeps, kind: str) -> None:
    gh.fail(kind, route="get_pull", times=2)
    assert api_for(gh, sleeps).pull(7).head_sha == SHA
    assert [r.status for r in gh.calls("get_pull")][-1] == 200
    assert len(gh.calls("get_pull")) == 3 and len(sleeps) == 2


def test_read_retry_after_is_honoured(gh, sleeps) -> None:
    gh.fail("403", route="get_pull", times=1, retry_after="7")
    api_for(gh, sleeps).pull(7)
    assert sleeps == [7.0]


def test_write_retry_after_is_honoured(gh, sleeps) -> None:
    gh.fail("429", route="create_status", times=1, retry_after="5")
    api_for(gh, sleeps).set_status(SHA, "success", "stagebot", "ok", None)
    assert sleeps == [5.0] and gh.latest_status(SHA, "stagebot")["state"] == "success"


def test_a_wait_longer_than_the_bound_fails_at_once(gh, sleeps) -> None:
    gh.fail("403", route="create_comment", times=1, retry_after="3600")
    with pytest.raises(GitHubError, match="asks to wait 3600s, longer than the 120s"):
        api_for(gh, sleeps, max_wait=120).create_comment(7, "x")
    assert sleeps == [] and not gh.comments


def test_read_with_a_too_long_retry_after_fails(gh, sleeps) -> None:
    gh.fail("429", route="get_pull", times=1, retry_after="900")
    with pytest.raises(GitHubError, match="could not get pull request"):
        api_for(gh, sleeps, max_wait=60).pull(7)
    assert sleeps == []


def test_backoff_is_exponential_and_bounded(gh, sleeps) -> None:
    gh.fail("5xx", route="edit_comment", times=5)
    comment = gh.add_comment(7, "x", author="github-actions[bot]")
    api = api_for(gh, sleeps, attempts=6, backoff_base=1.0, backoff_max=3.0)
    api.edit_comment(comment["id"], "y")
    assert sleeps == [1.0, 2.0, 3.0, 3.0, 3.0]


def test_retries_are_bounded_and_the_failure_is_reported(gh, sleeps) -> None:
    gh.fail("5xx", route="create_status", times=10)
    with pytest.raises(GitHubError, match=r"still failing after 4 attempts \(HTTP 502"):
        api_for(gh, sleeps).set_status(SHA, "success", "stagebot", "ok", None)
    assert len(gh.calls("create_status")) == 4


def test_reads_give_up_after_the_bound(gh, sleeps) -> None:
    gh.fail("5xx", route="list_comments", times=10)
    with pytest.raises(GitHubError, match="could not list the comments of octo-org/octo-repo#7"):
        api_for(gh, sleeps).comments(7)
    assert len(gh.calls("list_comments")) == 4


def test_permanent_failures_are_not_retried(gh, sleeps) -> None:
    with pytest.raises(GitHubError, match="HTTP 404"):
        api_for(gh, sleeps).create_comment(404, "x")
    assert len(gh.calls("create_comment")) == 1 and sleeps == []


def test_unreachable_github_is_an_error_not_a_hang(sleeps) -> None:
    with FakeGitHub() as gone:
        url = gone.url
    policy = RetryPolicy(
        backoff_base=0.001,
        sleep=sleeps,
        timeout=1,
        seconds_between_requests=0,
        seconds_between_writes=0,
    )
    api = PyGithubApi(url, "o/r", "t", policy)
    with pytest.raises(GitHubError, match="could not get pull request o/r#1: "):
        api.pull(1)
    with pytest.raises(GitHubError, match="still failing after 4 attempts"):
        api.create_comment(1, "x")


# ---------------------------------------------------------------- idempotent writes


def _recover(api: PyGithubApi, body: str):
    return lambda: next((c for c in api.comments(7) if c.body == body), None)


@pytest.mark.parametrize("kind", ["5xx-after-write", "timeout-after-write"])
def test_a_comment_that_landed_despite_the_error_is_not_posted_twice(gh, kind) -> None:
    gh.hold_s = 1.3
    gh.fail(kind, route="create_comment", times=1)
    api = api_for(gh)
    body = "<!-- stagebot:x -->"
    comment = api.create_comment(7, body, recover=_recover(api, body))
    assert [c["id"] for c in gh.comments.values()] == [comment.id]
    assert len(gh.calls("create_comment")) == 1


def test_a_comment_that_did_not_land_is_posted_again(gh) -> None:
    gh.fail("5xx", route="create_comment", times=2)
    api = api_for(gh)
    comment = api.create_comment(7, "body", recover=_recover(api, "body"))
    assert list(gh.comments) == [comment.id] and len(gh.calls("create_comment")) == 3


def test_every_write_survives_two_failures_each(gh) -> None:
    gh.fail_every_endpoint(2, ("5xx-after-write", "403"))
    gh.add_run(3)
    api = api_for(gh)
    comment = api.create_comment(7, "once", recover=_recover(api, "once"))
    api.edit_comment(comment.id, "edited")
    api.react(comment.id, "eyes")
    api.set_status(SHA, "failure", "stagebot", "no", None)
    api.cancel_run(50003)
    assert [c["body"] for c in gh.comments.values()] == ["edited"]
    assert len(gh.reactions) == 1
    assert gh.latest_status(SHA, "stagebot")["state"] == "failure"
    assert gh.runs[50003]["conclusion"] == "cancelled"


def test_timeouts_on_reads_are_retried(gh) -> None:
    gh.hold_s = 1.3
    gh.fail("timeout", route="get_pull", times=1)
    assert api_for(gh).pull(7).number == 7
    # exactly one retry after the held request (no wall-clock bound: flaky under load)
    assert [r.fault for r in gh.calls("get_pull")] == ["timeout", None]


# ---------------------------------------------------------------- configuration


def test_actions_env_defaults_and_requirements() -> None:
    env = ActionsEnv.from_environ(
        {"GITHUB_REPOSITORY": "o/r", "GITHUB_EVENT_NAME": "push", "GITHUB_EVENT_PATH": "/e"}
    )
    assert env.api_url == "https://api.github.com" and env.server_url == "https://github.com"
    assert env.run_number is None and env.run_url is None
    with pytest.raises(SetupError, match="GITHUB_EVENT_NAME, GITHUB_EVENT_PATH not set"):
        ActionsEnv.from_environ({"GITHUB_REPOSITORY": "o/r"})
    with pytest.raises(SetupError, match="GITHUB_RUN_NUMBER='x' is not a positive integer"):
        ActionsEnv.from_environ(
            {
                "GITHUB_REPOSITORY": "o/r",
                "GITHUB_EVENT_NAME": "push",
                "GITHUB_EVENT_PATH": "/e",
                "GITHUB_RUN_NUMBER": "x",
            }
        )
    with pytest.raises(SetupError, match="GITHUB_TOKEN is not set"):
        connect(env)


def test_enterprise_urls_make_the_run_link() -> None:
    env = ActionsEnv.from_environ(
        {
            "GITHUB_REPOSITORY": "o/r",
            "GITHUB_EVENT_NAME": "push",
            "GITHUB_EVENT_PATH": "/e",
            "GITHUB_SERVER_URL": "https://ghe.example/",
            "GITHUB_API_URL": "https://ghe.example/api/v3",
            "GITHUB_RUN_ID": "99",
        }
    )
    assert env.run_url == "https://ghe.example/o/r/actions/runs/99"


def test_retry_policy_from_environ() -> None:
    policy = RetryPolicy.from_environ(
        {"STAGEBOT_GITHUB_BACKOFF_S": "0.01", "STAGEBOT_GITHUB_THROTTLE_S": "0"}
    )
    assert policy.backoff_base == 0.01 and policy.seconds_between_writes == 0
    assert RetryPolicy.from_environ({}) == RetryPolicy()
    with pytest.raises(SetupError, match="is not a number"):
        RetryPolicy.from_environ({"STAGEBOT_GITHUB_ATTEMPTS": "many"})


def test_importing_the_adapter_package_loads_no_pygithub() -> None:
    """Every module of stagebot.bot.github imports PyGithub (``github``), requests and urllib3
    only inside the functions that call them: `bot parse` and `bot dry-run` start fast."""
    modules = [f"stagebot.bot.github.{m.name}" for m in pkgutil.iter_modules(package.__path__)]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in ('github', 'requests', 'urllib3', 'jwt') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert len(modules) >= 7 and result.stdout.strip() == "[]"
