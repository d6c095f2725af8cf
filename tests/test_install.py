"""The built wheel, installed into fresh virtual environments exactly as each workflow job that
runs `bot` installs it (the install lines are read from .github/workflows), runs a whole
pipeline: `bot dry-run` in every job's environment, then `bot handle-event` (plan), `bot
run-stage` per matrix entry (stage: a seconds-long fixture suite, SUCCESS) and `bot publish`
(report) against the local fake GitHub, each in the environment of the job that runs it.

A job's environment with a missing dependency (say `[harness]` without pytest) ends its step
with an error here, as it would on GitHub."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from github_server import FakeGitHub
from test_handle_event import BOT, PR, SHA
from workflow_installs import ROOT, bot_jobs, build_wheel, fresh_venv, source_copy

pytestmark = pytest.mark.slow
# Which job plays which part of the pipeline: the bot subcommand it runs.
PARTS = {"handle-event": "plan", "run-stage": "stage", "publish": "report"}
CATALOG = """
gpu_types:
  CPU: {device_names: [], runner_labels: [ubuntu-latest]}
families:
  - name: CPU-PyTorch
    kind: test
    timeout_minutes: 5
    suites: [{path: tests/fixtures/suites/check_basic.py}]
"""


def test_the_workflows_install_and_run_bot_the_way_this_test_reads_them() -> None:
    jobs = bot_jobs()
    runs = {command for job in jobs for command in job.commands}
    assert set(PARTS) <= runs, f"no workflow job runs {set(PARTS) - runs}: {jobs}"
    unknown = runs - set(PARTS)
    assert not unknown, f"a workflow runs `bot {unknown}`: add it to test_install.py"
    for job in jobs:
        assert job.installs, f"{job.workflow} job {job.job} runs bot but installs nothing"


@pytest.fixture(scope="module")
def environments(tmp_path_factory) -> tuple[Path, dict[str, dict[str, str]]]:
    """(a source checkout, {bot subcommand: the environment of the job that runs it})."""
    tmp = tmp_path_factory.mktemp("install")
    source = source_copy(tmp / "checkout")
    wheel = build_wheel(source, tmp / "dist")
    venvs: dict[tuple[str, ...], dict[str, str]] = {}
    by_command = {}
    for job in bot_jobs():
        if job.installs not in venvs:
            venvs[job.installs] = fresh_venv(tmp / f"venv-{len(venvs)}", job.installs, wheel)
        for command in job.commands:
            assert by_command.setdefault(command, venvs[job.installs]) is venvs[job.installs], (
                f"`bot {command}` runs in jobs that install differently"
            )
    return source, by_command


def _bot(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bot", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_every_job_environment_runs_bot_dry_run(environments) -> None:
    source, by_command = environments
    for command, env in by_command.items():
        done = _bot(env, source, "dry-run", '/bot run --stage-list "CPU-PyTorch-1"')
        assert done.returncode == 0, f"{command}'s job: {done.stdout}{done.stderr}"
        assert "CPU-PyTorch-1" in done.stdout


def test_a_pipeline_runs_through_the_jobs_environments(environments, tmp_path) -> None:
    source, by_command = environments
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG)
    ledger, plan = tmp_path / "ledger.sqlite", tmp_path / "plan"
    payload = json.loads((ROOT / "tests/fixtures/events/pr_comment_created.json").read_text())
    payload["comment"].update(id=7101, body="/bot run")
    payload["comment"]["user"]["login"] = "writer"
    payload["issue"]["number"] = PR
    event = tmp_path / "event.json"
    event.write_text(json.dumps(payload))
    with FakeGitHub() as gh:
        gh.add_pull(PR, head_sha=SHA, files=("src/x.py",))
        gh.grant("writer", "write")
        gh.add_comment(PR, "/bot run", "writer", comment_id=7101)
        github = {
            "GITHUB_EVENT_NAME": "issue_comment",
            "GITHUB_EVENT_PATH": str(event),
            "GITHUB_REPOSITORY": gh.repo,
            "GITHUB_API_URL": gh.url,
            "GITHUB_SERVER_URL": gh.base,
            "GITHUB_TOKEN": "ghs_test",
            "GITHUB_RUN_ID": "50101",
            "GITHUB_RUN_NUMBER": "101",
            "GITHUB_OUTPUT": str(tmp_path / "output.txt"),
            "STAGEBOT_GITHUB_BACKOFF_S": "0.001",
        }

        def bot(command: str, *args: str) -> str:
            env = {**by_command[command], **(github if command != "run-stage" else {})}
            done = _bot(env, source, command, *args)
            assert done.returncode == 0, f"`bot {command}`: {done.stdout}{done.stderr}"
            return done.stdout

        bot("handle-event", "--catalog", str(catalog), "--ledger", str(ledger), "--out", str(plan))
        outputs = json.loads((plan / "outputs.json").read_text())
        matrix = json.loads(outputs["matrix"])
        assert [entry["stage"] for entry in matrix] == ["CPU-PyTorch-1"]
        results = tmp_path / "results"
        for entry in matrix:
            ran = bot("run-stage", "--entry", json.dumps(entry), "--out", str(results))
            assert "SUCCESS" in ran
        bot(
            "publish", "--results", str(results), "--ledger", str(ledger),
            "--plan", str(plan / "plan.json"), "--artifact-digest", outputs["artifact_digest"],
        )  # fmt: skip
        (reply,) = gh.bot_comments(PR, BOT)
        assert "completed with state SUCCESS" in reply["body"], reply["body"]
        assert gh.latest_status(SHA, "stagebot")["state"] == "success"
