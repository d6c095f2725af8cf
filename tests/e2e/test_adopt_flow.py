"""Adoption, proved: `bot init` in a fresh copy of the sample repository (tests/fixtures/
sample_repo), then the three workflows it generated driven end to end against the fake GitHub.
Each job gets a fresh virtual environment with stagebot installed exactly as its generated
install step says (the built wheel, by path and sha256); the plan and report jobs run in a
checkout of the sample's default branch, the stage jobs in the PR's, after `bot stage-setup`
installed what the sample's catalog declares.

The pull request changes only a core test, so a plain `/bot run` runs the two CPU stages and
the GPU stage skips by the path rule `bot init` gave it: the status is `success`, and a second run
reuses both. Main's post-merge pipeline runs every stage: this machine has no GPU, so there the
DGX_H200 stage job says NOT_RUN (needs 1 x DGX_H200); test_add passes, and the PR that breaks it
gets NEW with its key lines and the `failure` status.
"""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import bot_process
from helpers.fake_pr import PR, marker_of, replies, status
from helpers.installed_jobs import InstalledJobs
from helpers.workflow_jobs import Jobs, gh
from workflow_installs import bot_jobs, build_wheel, installed_venv, run_step, source_copy

from stagebot.bot.adopt.workflows import load_settings
from stagebot.harness.ledger.book import Ledger
from stagebot.stages.plan import Plan

pytestmark = pytest.mark.slow
SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "sample_repo"
CPU_STAGES = {"CPU-Python-Core-1": "SUCCESS", "CPU-Python-Ops-1": "SUCCESS"}


@pytest.fixture(scope="module")
def adoption(tmp_path_factory) -> tuple[Path, dict[str, dict[str, str]], set]:
    """(the sample after `bot init --write`, {bot subcommand: its job's environment}, the
    setups the stage jobs' environment has run, by tree)."""
    tmp = tmp_path_factory.mktemp("adopt")
    wheel = build_wheel(source_copy(tmp / "stagebot"), tmp / "dist")
    repo = tmp / "sample"
    shutil.copytree(SAMPLE, repo)
    init = ["init", "--root", str(repo), "--stagebot-wheel", str(wheel), "--local-wheel"]
    done = _this_bot(*init, "--write")
    assert done.returncode == 0, done.stdout + done.stderr
    venvs: dict[tuple[str, ...], dict[str, str]] = {}
    by_command = {}
    for job in bot_jobs(repo / ".github" / "workflows"):
        assert "pip install --quiet ." not in "\n".join(job.install_steps), job  # never the repo
        key = job.install_steps + (("stage",) if "run-stage" in job.commands else ())
        if key not in venvs:  # the stage job's own: its setup installs the sample into it
            venvs[key] = installed_venv(tmp / f"venv-{len(venvs)}", job, tmp / "runner-temp")
        for command in job.commands:
            by_command[command] = venvs[key]
    assert {"handle-event", "dispatch", "stage-setup", "run-stage", "report-run"} <= set(by_command)
    return repo, by_command, set()


def _this_bot(*args: str) -> subprocess.CompletedProcess:
    return bot_process(*args, cwd=Path.cwd())


class SampleJobs(InstalledJobs):
    """The sample's jobs: each starts in a checkout (the default branch for plan and report,
    the PR's tree for the stage run) and runs the `bot` its generated workflow installed."""

    def __init__(self, repo: Path, by_command, set_up, gh, tmp, monkeypatch, capsys) -> None:
        Jobs.__init__(self, gh, tmp, monkeypatch, capsys)
        self.set_up = set_up
        gh.files[PR] = ["tests/core/test_add.py"]  # the pull request changes a core test
        self.by_command, self.main, self.pr_tree = by_command, repo, repo
        plan = (repo / ".github/workflows/bot.yml").read_text()
        assert "bot handle-event --catalog .github/stagebot/catalog " in plan
        self.catalog = Path(".github/stagebot/catalog")  # as bot.yml passes it

    def job(self, name: str) -> Path:
        folder = super().job(name)
        shutil.copytree(self.pr_tree if name == "stage" else self.main, folder, dirs_exist_ok=True)
        return folder

    def stages(self, outputs: dict, conclusion: str = "success") -> int:
        """stage.yml's job per entry: `bot stage-setup`, then `bot run-stage`, in the PR's tree.
        The jobs share one environment here (on GitHub each has a fresh runner): a setup it has
        already run for the same tree is not run again (it would install the same project)."""
        run_id = outputs["stage_run"]
        folder = self.job("stage")
        env = self.by_command["run-stage"]
        for entry in json.loads(self.gh.dispatches[-1]["inputs"]["matrix"]):
            setup = (str(self.pr_tree), json.dumps(entry["setup"], sort_keys=True))
            steps = [] if setup in self.set_up else [(["stage-setup", "--entry"], (0,))]
            self.set_up.add(setup)
            for args, codes in (*steps, (["run-stage", "--out", "results", "--entry"], (0, 1))):
                args = [*args, json.dumps(entry)]
                done = subprocess.run(
                    ["bot", *args], cwd=folder, env=env, capture_output=True, text=True,
                    timeout=600,
                )  # fmt: skip
                assert done.returncode in codes, f"bot {args[0]}: {done.stdout}{done.stderr}"
            self.upload_results(run_id, entry["stage"], folder / "results")
        self.gh.runs[run_id].update(status="completed", conclusion=conclusion)
        return run_id


@pytest.fixture
def flow(adoption, gh, tmp_path, monkeypatch, capsys) -> SampleJobs:
    return SampleJobs(*adoption, gh, tmp_path, monkeypatch, capsys)


def test_the_sample_adopted_by_bot_init_runs_its_stages_and_reuses_them(gh, flow) -> None:
    """A pull request that changes only a core test: `/bot run` runs both CPU stages, the GPU
    stage skips by its path rule, the status is success; a second `/bot run` reuses both."""
    outputs = flow.plan("/bot run", 101)
    assert {e["stage"] for e in json.loads(outputs["matrix"])} == set(CPU_STAGES)
    plan = Plan.from_json(json.loads(Path(".stagebot/plan/plan.json").read_text()))
    (gpu,) = (s for s in plan.shards if s.gpu_type == "DGX_H200")
    assert (gpu.action, gpu.reason) == (
        "skip",
        "skip_if_only_changed: every changed file matches **/*.md, docs/**, tests/core/**",
    )
    flow.report(flow.stages(outputs), 101)
    (reply,) = replies(gh)
    assert marker_of(reply).stages == CPU_STAGES
    assert status(gh)["state"] == "success", status(gh)
    assert "PR_Github #101 passed on c0ffee0" == status(gh)["description"]
    flow.report(flow.stages(flow.plan("/bot run", 102)), 102)  # nothing to run: the stage job
    second = next(c for c in replies(gh) if marker_of(c).pipeline == 102)  # is skipped
    assert marker_of(second).stages == dict.fromkeys(CPU_STAGES, "REUSED")
    assert status(gh)["description"] == "PR_Github #102 passed on c0ffee0", status(gh)
    assert status(gh)["state"] == "success"


def test_a_failing_test_in_a_pr_is_new_with_its_key_lines(gh, flow, tmp_path) -> None:
    """Main's post-merge pipeline (bot.yml's push trigger) runs every stage: the GPU one's job,
    on this CPU machine, says NOT_RUN and why; test_add passed there, and the PR that
    breaks it fails the plain `/bot run` (the GPU stage skips) with NEW."""
    outputs = flow.push(201)
    report, _ = flow.report(flow.stages(outputs), 201)
    with Ledger.open(Path(report["ledger"]), readonly=True) as book:
        results = {r.stage: (r.state, r.evidence) for r in book.pipeline(201).results}
    assert results == {
        **{stage: (state, None) for stage, state in CPU_STAGES.items()},
        "DGX_H200-Python-Ops-1": (
            "NOT_RUN",
            "needs 1 x DGX_H200 GPU(s); this host has none of that type (no GPU)",
        ),
    }
    assert any(a["name"] == "stagebot-ledger-main" for a in gh.artifacts.values())
    broken = tmp_path / "pr-tree"
    shutil.copytree(flow.main, broken)
    test = broken / "tests/core/test_add.py"
    test.write_text(test.read_text().replace("add(2, 3) == 5", "add(2, 3) == 6"))
    flow.pr_tree = broken
    flow.whole("/bot run", 101)  # the GPU stage skips: the PR changes only a core test
    (reply,) = replies(gh)
    body = reply["body"]
    assert marker_of(reply).stages == {
        "CPU-Python-Core-1": "FAILURE",
        "CPU-Python-Ops-1": "SUCCESS",
    }
    assert "#### NEW failures (1) — fail here, not this way on base #201" in body, body
    assert "UNCLASSIFIED" not in body, body
    assert "<code>tests/core/test_add.py::test_add</code>" in body, body
    assert "<pre>E       assert 5 == 6\nE        +  where 5 = add(2, 3)" in body, body  # key lines
    assert (status(gh)["state"], status(gh)["description"]) == (
        "failure",
        "PR_Github #101 failed: ❌ 1 new failure(s) this PR likely caused — fix them, then "
        "comment `/bot run` (it re-runs only what failed).",
    )


def test_a_wheel_that_does_not_match_the_pinned_sha256_is_refused(adoption, tmp_path) -> None:
    """The negative control of the pin: the plan job's install step, with one digit of the
    sha256 changed, fails at its first line (pip refuses the wheel) in the job's environment."""
    repo, by_command, _ = adoption
    pinned = load_settings(repo / ".github/stagebot-init.yml").stagebot.sha256
    (script,) = next(
        j for j in bot_jobs(repo / ".github/workflows") if j.job == "plan"
    ).install_steps
    assert f"--hash=sha256:{pinned}" in script and "--require-hashes" in script
    wrong = ("1" if pinned[0] == "0" else "0") + pinned[1:]
    done = run_step(
        script.replace(pinned, wrong), {**by_command["handle-event"], "RUNNER_TEMP": str(tmp_path)}
    )
    assert done.returncode != 0, done.stdout + done.stderr
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in done.stderr, done.stderr
    assert f"Expected sha256 {wrong}" in done.stderr and f"Got        {pinned}" in done.stderr
