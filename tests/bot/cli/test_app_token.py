"""`bot app-token`: the bot's GitHub App installation token, minted by real PyGithub against the
fake GitHub, which checks the JWT's RS256 signature with the App's public key. The App's login
then becomes the bot's: a `github-actions[bot]` comment (any workflow's GITHUB_TOKEN writes as
that login) can no longer pose as the bot's reply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from github_server import FakeGitHub
from helpers.app_keys import APP_ID, app_key
from helpers.cli import bot
from helpers.fake_pr import PR, SHA, marker_of

from stagebot.bot.cli.workflow.app_token import PERMISSIONS

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def keys() -> tuple[str, bytes]:
    return app_key()


@pytest.fixture
def gh(keys):
    with FakeGitHub() as server:
        server.add_pull(PR, head_sha=SHA, files=("src/x.py",))
        server.grant("writer", "write")
        server.grant("contributor", "write")  # the PR's author: run needs no --sha
        server.add_app(APP_ID, "stagebot-app", keys[1])
        yield server


@pytest.fixture
def run_bot(gh, tmp_path, monkeypatch, capsys):
    def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
        output = tmp_path / "output.txt"
        output.write_text("")
        event = tmp_path / "event.json"
        if not event.exists():
            event.write_text("{}")
        for key, value in {
            "GITHUB_EVENT_NAME": "issue_comment",
            "GITHUB_EVENT_PATH": str(event),
            "GITHUB_REPOSITORY": gh.repo,
            "GITHUB_API_URL": gh.url,
            "GITHUB_OUTPUT": str(output),
            "STAGEBOT_GITHUB_BACKOFF_S": "0.001",
            "STAGEBOT_GITHUB_THROTTLE_S": "0",
            "STAGEBOT_GITHUB_TIMEOUT_S": "60",  # only stops a hang: no fault here holds an answer
            "STAGEBOT_GITHUB_ATTEMPTS": "1",
            **(env or {}),
        }.items():
            monkeypatch.setenv(key, value)
        monkeypatch.chdir(tmp_path)
        code, out, err = bot(capsys, *args)
        lines = output.read_text().splitlines()
        return code, out + err, dict(line.split("=", 1) for line in lines if "=" in line)

    return run


def test_the_token_is_minted_for_the_jobs_permissions_and_masked(gh, run_bot, keys) -> None:
    env = {"STAGEBOT_APP_ID": str(APP_ID), "STAGEBOT_APP_PRIVATE_KEY": keys[0]}
    code, log, outputs = run_bot("app-token", "--job", "report", env=env)
    assert code == 0, log
    assert outputs["login"] == "stagebot-app[bot]" and outputs["token"].startswith("ghs_")
    assert f"::add-mask::{outputs['token']}" in log
    (minted,) = gh.calls("create_token")
    assert minted.path == "/app/installations/77/access_tokens"
    assert minted.body == {"permissions": PERMISSIONS["report"]}
    assert minted.authorization.startswith("Bearer ")  # the JWT the fake verified
    assert [r.route for r in gh.requests] == ["get_installation", "create_token", "get_app"]


def test_without_an_app_the_job_keeps_its_github_token(gh, run_bot) -> None:
    env = {"STAGEBOT_APP_ID": "", "STAGEBOT_APP_PRIVATE_KEY": ""}
    code, log, outputs = run_bot("app-token", "--job", "plan", env=env)
    assert code == 0 and outputs == {"token": "", "login": ""} and gh.requests == []
    assert "uses its GITHUB_TOKEN" in log


@pytest.mark.parametrize(
    "app_id, key, code, message",
    [
        ("4242", "", 2, "STAGEBOT_APP_PRIVATE_KEY is empty"),
        ("my-app", "x", 2, "is not the App's numeric id"),
        ("4242", "not a key", 2, "cannot sign a token"),
        (  # the JWT names another App
            "99",
            "KEY",
            3,
            "could not mint the GitHub App's installation token for octo-org/octo-repo: HTTP 401"
            ": A JSON web token could not be decoded (is the App installed on the repository, "
            "with these permissions: ",
        ),
        ("4242", "OTHER", 3, "HTTP 401"),  # signed with another key
    ],
)
def test_a_wrong_app_setting_is_one_error_line(run_bot, keys, app_id, key, code, message) -> None:
    key = {"KEY": keys[0], "OTHER": app_key()[0]}.get(key, key)
    env = {"STAGEBOT_APP_ID": app_id, "STAGEBOT_APP_PRIVATE_KEY": key}
    got, log, _ = run_bot("app-token", "--job", "plan", env=env)
    assert got == code and log.startswith("Error: ") and message in log, log
    assert "Traceback" not in log and keys[0] not in log


def test_with_the_apps_login_another_workflows_comment_cannot_pose_as_the_bot(
    gh, run_bot, keys, tmp_path
) -> None:
    """Every workflow's GITHUB_TOKEN writes as github-actions[bot]; with the default bot_login
    such a comment carrying a marker for the command is taken as the bot's own reply (the
    command is then skipped as already handled). Under the App's login it is not."""
    from stagebot.bot.protocols.marker import ReplyMarker

    body = "/bot run"
    payload = json.loads((ROOT / "tests/fixtures/events/pr_comment_created.json").read_text())
    payload["comment"].update(id=7001, body=body)
    payload["comment"]["user"]["login"] = "writer"
    payload["issue"]["number"] = PR
    (tmp_path / "event.json").write_text(json.dumps(payload))
    gh.add_comment(PR, body, "writer", comment_id=7001)
    squatter = ReplyMarker(9, SHA, 7001, "SUCCESS").render()
    gh.add_comment(PR, f"posted by another workflow\n\n{squatter}", "github-actions[bot]")
    args = ("handle-event", "--catalog", str(ROOT / "tests/fixtures/catalog"))
    common = {"GITHUB_RUN_NUMBER": "101", "GITHUB_RUN_ID": "50101"}

    code, log, _ = run_bot(*args, env={**common, "GITHUB_TOKEN": "ghs_actions"})
    assert code == 0 and "already handled" in log, log  # the shared login: the squatter wins
    env = {"STAGEBOT_APP_ID": str(APP_ID), "STAGEBOT_APP_PRIVATE_KEY": keys[0]}
    _, _, app = run_bot("app-token", "--job", "plan", env=env)
    app_env = {**common, "GITHUB_TOKEN": app["token"], "STAGEBOT_BOT_LOGIN": app["login"]}
    code, log, outputs = run_bot(*args, env=app_env)
    assert code == 0 and outputs["run"] == "true", log
    (reply,) = [c for c in gh.comments.values() if c["user"]["login"] == "stagebot-app[bot]"]
    assert marker_of(reply).comment_id == 7001
    code, log, _ = run_bot(*args, env=app_env)  # redelivered: the App's reply dedupes it
    assert "already handled" in log and f"reply {reply['id']}" in log
