"""`bot handle-event` as Actions runs it: an event delivered through the CLI, with real PyGithub
against the fake GitHub (tests/github_server.py), and what the command did."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from github_server import FakeGitHub, user_id

from helpers.cli import bot
from helpers.fake_pr import COMMENT_ID, PR, ROLES, SHA

EVENTS = Path(__file__).resolve().parents[1] / "fixtures" / "events"


@dataclass
class Result:
    code: int
    out: str
    err: str
    outputs: dict[str, str]

    @property
    def matrix(self) -> list[dict]:
        return json.loads(self.outputs["matrix"])


@pytest.fixture
def gh():
    """The fake GitHub with the PR and a collaborator of each role."""
    with FakeGitHub() as server:
        server.add_pull(PR, head_sha=SHA, files=("bot/comments/grammar.py",))
        for login, role in ROLES:
            server.grant(login, role)
        server.permissions["custom"] = ("write", "release-manager")
        yield server


@pytest.fixture
def handle(gh, tmp_path, monkeypatch, capsys):
    """Deliver an event to `bot handle-event` the way Actions does, and collect what it did."""

    def deliver(
        body: str = "/bot run",
        *,
        author: str = "writer",
        fixture: str = "pr_comment_created.json",
        comment_id: int = COMMENT_ID,
        run_number: int | None = 101,
        number: int = PR,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        token: str | None = "ghs_test",
        command: str = "handle-event",
    ) -> Result:
        payload = json.loads((EVENTS / fixture).read_text())
        if "comment" in payload:
            payload["comment"]["body"] = body
            payload["comment"]["id"] = comment_id
            payload["comment"]["user"]["login"] = author
            payload["comment"]["user"]["id"] = user_id(author)
            payload["issue"]["number"] = number
            if comment_id not in gh.comments:
                gh.add_comment(number, body, author, comment_id=comment_id)
        event = tmp_path / f"event-{comment_id}-{run_number}.json"
        event.write_text(json.dumps(payload))
        output = tmp_path / f"output-{comment_id}-{run_number}.txt"
        output.write_text("")
        variables = {
            "GITHUB_EVENT_NAME": "push" if fixture.startswith("push") else "issue_comment",
            "GITHUB_EVENT_PATH": str(event),
            "GITHUB_REPOSITORY": gh.repo,
            "GITHUB_API_URL": gh.url,
            "GITHUB_SERVER_URL": gh.base,
            "GITHUB_OUTPUT": str(output),
            "GITHUB_RUN_ID": str(50000 + (run_number or 0)),
            "STAGEBOT_GITHUB_BACKOFF_S": "0.001",
            "STAGEBOT_GITHUB_THROTTLE_S": "0",
            "STAGEBOT_GITHUB_TIMEOUT_S": "60",  # only stops a hang: no fault here holds an answer
            **(env or {}),
        }
        if run_number is not None:
            variables["GITHUB_RUN_NUMBER"] = str(run_number)
        if token is not None:
            variables["GITHUB_TOKEN"] = token
        else:
            monkeypatch.delenv("GITHUB_TOKEN", raising=False)
        for key, value in variables.items():
            monkeypatch.setenv(key, value)
        monkeypatch.chdir(tmp_path)  # no .github/stagebot.yml here: the defaults
        code, out, err = bot(capsys, command, *args)
        outputs = dict(
            line.split("=", 1) for line in output.read_text().splitlines() if "=" in line
        )
        return Result(code, out, err, outputs)

    return deliver


def assert_nothing_ran(result: Result) -> None:
    assert result.code == 0, result.err
    assert result.outputs["run"] == "false" and result.matrix == []
