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

from pathlib import Path

import pytest
from helpers.fake_pr import marker_of, replies, status
from helpers.installed_jobs import InstalledJobs, installed_bot
from helpers.workflow_jobs import gh
from workflow_installs import (
    bot_jobs,
    build_wheel,
    extras_requiring,
    fresh_venv,
    source_copy,
    stage_setup_lines,
    with_wheel,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, Path]:
    """(a source checkout, the wheel built from it)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = source_copy(tmp / "checkout")
    return source, build_wheel(source, tmp / "dist")


@pytest.fixture(scope="module")
def environments(tmp_path_factory, wheel) -> tuple[Path, dict[str, dict[str, str]], Path]:
    """(a source checkout, {bot subcommand: the environment of the job that runs it}, the
    wheel)."""
    tmp = tmp_path_factory.mktemp("install")
    source, wheel = wheel
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
    assert {"handle-event", "stage-setup", "run-stage"} <= set(by_command), bot_jobs()
    return source, by_command, wheel


def test_every_job_environment_runs_dry_run_and_loads_its_subcommands(environments) -> None:
    source, by_command, _ = environments
    for command, env in by_command.items():
        done = installed_bot(env, source, "dry-run", '/bot run --stage-list "CPU-PyTorch-1"')
        assert done.returncode == 0, f"{command}'s job: {done.stdout}{done.stderr}"
        assert "CPU-PyTorch-1" in done.stdout
        done = installed_bot(env, source, command, "--help")
        assert done.returncode == 0, f"`bot {command} --help`: {done.stdout}{done.stderr}"


def test_a_pipeline_runs_through_the_jobs_environments(
    environments, gh, tmp_path, monkeypatch, capsys
) -> None:
    _, by_command, wheel = environments
    jobs = InstalledJobs(by_command, wheel, gh, tmp_path, monkeypatch, capsys)
    jobs.whole("/bot run", 101)
    (reply,) = replies(gh)
    assert "completed with state SUCCESS" in reply["body"], reply["body"]
    assert marker_of(reply).stages == {"CPU-PyTorch-1": "SUCCESS", "CPU-Build_Check": "SUCCESS"}
    assert status(gh)["state"] == "success"


@pytest.mark.parametrize(
    ("stage", "extras"),
    [("DGX_H200-PyTorch-1", {"harness", "kernels"}), ("CPU-PyTorch-1", {"harness"})],
)
def test_the_stage_job_installs_what_its_stage_declares(environments, stage, extras) -> None:
    """The DGX_H200-PyTorch stage forces the CuTe DSL backend: its job installs [kernels]
    (CuTe DSL) because the catalog says so, and a stage that does not declare it does not.
    The lines are the ones the stage job's `bot stage-setup` step runs for the plan's entry."""
    from stagebot.bot.comments.grammar import parse_comment
    from stagebot.stages.catalog import load_catalog
    from stagebot.stages.matrix import matrix_entries
    from stagebot.stages.planner import plan_run

    source, by_command, built = environments
    job = next(job for job in bot_jobs() if "run-stage" in job.commands)
    assert job.commands.index("stage-setup") < job.commands.index("run-stage")
    assert all("[" not in line for line in job.installs), "an extra written by hand"
    catalog = load_catalog(source / "stages" / "catalog")
    plan = plan_run(parse_comment(f'/bot run --stage-list "{stage}"'), catalog, commit="a" * 40)
    (entry,) = matrix_entries(plan, catalog, 1)
    lines = stage_setup_lines(entry.to_json(), by_command["stage-setup"])
    named = {extra for line in lines for extra in with_wheel(line, built)[1]}
    assert named == extras, lines
    assert ("kernels" in named) == bool(extras_requiring(built, "nvidia-cutlass-dsl") & named)
