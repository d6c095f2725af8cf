"""`bot doctor` where GitHub cannot be asked (no token, or no network): the repository's own checks
run and report first, each GitHub check says "not checked" and why, and the exit status says
that not everything passed."""

from __future__ import annotations

import json
import os
import socket

from helpers.sample_project import adopted_sample, bot

LOCAL = ("files", "areas", "workflow-lint", "stage-needs")
GITHUB = (
    "workflows",
    "stage-branch",
    "stage-ruleset",
    "runners",
    "app",
    "workflow-permissions",
    "fork-approval",
    "required-status",
)


def _closed_port() -> int:
    """A local port nothing listens on: connecting is refused at once, as offline."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_without_a_network_the_local_checks_run_and_github_is_not_checked(tmp_path) -> None:
    repo = adopted_sample(tmp_path)
    offline = {
        "GITHUB_TOKEN": "x",
        "GITHUB_API_URL": f"http://127.0.0.1:{_closed_port()}",
        "STAGEBOT_GITHUB_RETRIES": "0",
    }
    done = bot(repo / "src", "doctor", "--repo", "o/n", env=offline)  # from a subfolder
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == [f"PASS {name}" for name in LOCAL]
    for line, name in zip(lines[4:12], GITHUB, strict=True):
        assert line.startswith(f"SKIP {name}: not checked: GitHub at http://127.0.0.1:"), line
        assert "did not answer (ConnectionError on GET /contents/" in line
    assert lines[-1] == "4 of 12 checks pass; 8 not checked"


def test_without_a_token_each_github_check_says_why_and_local_faults_still_fail(tmp_path) -> None:
    repo = adopted_sample(tmp_path)
    stage = repo / ".github/workflows/stage.yml"
    stage.write_text(stage.read_text() + "# edited by hand\n")
    done = bot(repo, "doctor", env={"GITHUB_TOKEN": "", "GITHUB_REPOSITORY": "o/n"})
    assert done.returncode == 1
    assert "FAIL files: .github/workflows/stage.yml differs" in done.stdout
    assert "     fix: `bot init` shows the difference, `bot init --write` writes them" in (
        done.stdout
    )
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIP")]
    assert len(skipped) == 8
    assert all("not checked: no GITHUB_TOKEN" in line for line in skipped)
    assert done.stdout.splitlines()[-1] == "3 of 12 checks pass; 8 not checked"


def test_without_actionlint_only_bot_inits_own_workflows_pass_the_lint(tmp_path) -> None:
    repo = adopted_sample(tmp_path)
    bare = {"GITHUB_TOKEN": "", "PATH": os.defpath}  # no actionlint on this PATH
    lint = _lint(bot(repo, "doctor", "--json", env=bare))
    assert lint["ok"] and "which stagebot's tests lint with actionlint" in lint["detail"]
    stage = repo / ".github/workflows/stage.yml"
    stage.write_text(stage.read_text() + "# edited by hand\n")
    lint = _lint(bot(repo, "doctor", "--json", env=bare))
    assert not lint["ok"] and not lint["checked"]
    assert lint["detail"].startswith("not checked: actionlint is not installed here")


def _lint(done) -> dict:
    return next(check for check in json.loads(done.stdout) if check["name"] == "workflow-lint")
