"""The built wheel, installed into fresh virtual environments exactly as each workflow job that
runs `bot` installs it (the install lines are read from .github/workflows), runs what the jobs
run: `bot dry-run` and `--help` of every subcommand a job calls in that job's environment, then
a whole pipeline (tests/helpers/workflow_jobs.py: plan, the dispatched stage run with
`bot run-stage` on a seconds-long fixture suite, report) against the local fake GitHub, each
`bot` call in the environment of the workflow job that makes it.

A job's environment with a missing dependency (say `[harness]` without pytest) ends its step
with an error here, as it would on GitHub."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.fake_pr import marker_of, replies, status
from helpers.workflow_jobs import Jobs, gh
from workflow_installs import bot_jobs, build_wheel, fresh_venv, source_copy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def environments(tmp_path_factory) -> tuple[Path, dict[str, dict[str, str]]]:
    """(a source checkout, {bot subcommand: the environment of the job that runs it})."""
    tmp = tmp_path_factory.mktemp("install")
    source = source_copy(tmp / "checkout")
    wheel = build_wheel(source, tmp / "dist")
    venvs: dict[tuple[str, ...], dict[str, str]] = {}
    by_command = {}
    for job in bot_jobs():
        assert job.installs, f"{job.workflow} job {job.job} runs bot but installs nothing"
        if job.installs not in venvs:
            venvs[job.installs] = fresh_venv(tmp / f"venv-{len(venvs)}", job.installs, wheel)
        for command in job.commands:
            assert by_command.setdefault(command, venvs[job.installs]) is venvs[job.installs], (
                f"`bot {command}` runs in jobs that install differently"
            )
    assert {"handle-event", "run-stage"} <= set(by_command), bot_jobs()
    return source, by_command


def _bot(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bot", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_every_job_environment_runs_dry_run_and_loads_its_subcommands(environments) -> None:
    source, by_command = environments
    for command, env in by_command.items():
        done = _bot(env, source, "dry-run", '/bot run --stage-list "CPU-PyTorch-1"')
        assert done.returncode == 0, f"{command}'s job: {done.stdout}{done.stderr}"
        assert "CPU-PyTorch-1" in done.stdout
        done = _bot(env, source, command, "--help")
        assert done.returncode == 0, f"`bot {command} --help`: {done.stdout}{done.stderr}"


class InstalledJobs(Jobs):
    """The workflow jobs, each `bot` call made by the installed `bot` of the workflow job that
    runs that subcommand, and `bot run-stage` by the stage job's Python."""

    def __init__(self, by_command: dict[str, dict[str, str]], *args) -> None:
        super().__init__(*args)
        self.by_command = by_command
        self.python = str(Path(self.environment("run-stage")["VIRTUAL_ENV"]) / "bin" / "python")

    def environment(self, command: str) -> dict[str, str]:
        assert command in self.by_command, f"no workflow job runs `bot {command}`"
        github = {k: v for k, v in os.environ.items() if k.startswith(("GITHUB_", "STAGEBOT_"))}
        return {**self.by_command[command], **github}

    def bot(self, *args: str, code: int = 0) -> str:
        done = _bot(self.environment(args[0]), Path.cwd(), *args)
        assert done.returncode == code, f"`bot {args[0]}`: {done.stdout}{done.stderr}"
        return done.stdout + done.stderr


def test_a_pipeline_runs_through_the_jobs_environments(
    environments, gh, tmp_path, monkeypatch, capsys
) -> None:
    _, by_command = environments
    jobs = InstalledJobs(by_command, gh, tmp_path, monkeypatch, capsys)
    jobs.whole("/bot run", 101)
    (reply,) = replies(gh)
    assert "completed with state SUCCESS" in reply["body"], reply["body"]
    assert marker_of(reply).stages == {"CPU-PyTorch-1": "SUCCESS", "CPU-Build_Check": "SUCCESS"}
    assert status(gh)["state"] == "success"
