"""The workflows: zizmor (from PyPI, offline) finds nothing, and the bot workflow keeps the
security shape of comment-triggered CI (ci-anchors.md): PR code only in secret-less,
read-only jobs on the pinned SHA; stagebot itself from the default branch."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

WORKFLOWS = Path(__file__).resolve().parents[1] / ".github" / "workflows"
EXPRESSION = re.compile(r"\$\{\{")
HASH_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads `on` as True
    return data


def steps(job: dict) -> list[dict]:
    return job["steps"]


@pytest.mark.parametrize("persona", ["regular", "auditor"])
def test_zizmor_finds_nothing(persona: str) -> None:
    zizmor = shutil.which("zizmor")
    if zizmor is None:
        missing = "zizmor is not installed (it comes with the [test] extra: pip install zizmor)"
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(f"{missing}; CI must run the workflow audit, not skip it")
        pytest.skip(missing)
    done = subprocess.run(
        [zizmor, "--offline", "--no-progress", f"--persona={persona}", str(WORKFLOWS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout + done.stderr


@pytest.mark.parametrize("name", ["bot.yml", "ci.yml"])
def test_actions_are_pinned_and_credentials_not_persisted(name: str) -> None:
    for job in load(name)["jobs"].values():
        for step in steps(job):
            if "uses" in step:
                assert HASH_PIN.match(step["uses"]), step["uses"]
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def test_no_expression_is_pasted_into_a_shell_script() -> None:
    for name in ("bot.yml", "ci.yml"):
        for job in load(name)["jobs"].values():
            for step in steps(job):
                assert not EXPRESSION.search(step.get("run", "")), step["run"]


def test_bot_workflow_triggers_and_default_permissions() -> None:
    workflow = load("bot.yml")
    assert workflow["on"]["issue_comment"] == {"types": ["created"]}
    assert workflow["on"]["push"] == {"branches": ["main"]}
    assert workflow["permissions"] == {}


def test_caches_are_restored_only_in_a_job_without_permissions() -> None:
    """A cache entry may have been saved by PR code, and restoring one can overwrite any file
    of the restoring job: only the permission-less restore job restores, and the jobs that
    hold tokens take what it restored as an artifact (and check it before use)."""
    jobs = load("bot.yml")["jobs"]
    restoring = [
        name
        for name, job in jobs.items()
        if any(s.get("uses", "").startswith("actions/cache/restore@") for s in steps(job))
    ]
    assert restoring == ["restore"]
    restore = jobs["restore"]
    assert restore["permissions"] == {}
    text = yaml.safe_dump(restore)
    assert "secrets." not in text and "github.token" not in text and "GITHUB_TOKEN" not in text
    assert "contains(github.event.comment.body, '/bot')" in restore["if"]
    assert jobs["plan"]["needs"] == "restore"
    for name in ("plan", "report"):
        downloads = [
            s["with"].get("name")
            for s in steps(jobs[name])
            if "download-artifact" in s.get("uses", "")
        ]
        assert "stagebot-restored" in downloads, name


def test_plan_job_runs_stagebot_from_the_default_branch_with_minimal_permissions() -> None:
    plan = load("bot.yml")["jobs"]["plan"]
    assert plan["permissions"] == {
        "contents": "read",
        "issues": "write",
        "pull-requests": "read",
        "statuses": "write",
        "actions": "write",
    }
    checkout = steps(plan)[0]
    assert checkout["with"]["ref"] == "${{ github.event.repository.default_branch }}"
    handle = next(s for s in steps(plan) if s.get("id") == "handle")
    assert handle["run"].startswith("bot handle-event --ledger ")
    assert set(plan["outputs"]) >= {"run", "matrix"}
    assert plan["concurrency"]["cancel-in-progress"] is False  # never cancels on a comment


def test_stage_job_runs_pr_code_without_secrets_on_the_pinned_sha() -> None:
    stage = load("bot.yml")["jobs"]["stage"]
    assert stage["permissions"] == {"contents": "read"}
    assert stage["strategy"]["matrix"]["entry"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert stage["runs-on"] == "${{ matrix.entry.runner_labels }}"
    text = yaml.safe_dump(stage)
    assert "secrets." not in text and "github.token" not in text and "GITHUB_TOKEN" not in text
    checkout = steps(stage)[0]
    assert checkout["with"]["ref"] == "${{ matrix.entry.commit }}"
    run = next(s for s in steps(stage) if "run-stage" in s.get("run", ""))
    assert run["env"]["ENTRY"] == "${{ toJSON(matrix.entry) }}"
    upload = steps(stage)[-1]
    assert upload["if"] == "always()" and upload["with"]["path"] == "results/"


def test_report_job_always_reports_and_saves_a_published_ledger() -> None:
    report = load("bot.yml")["jobs"]["report"]
    assert report["if"].startswith("always()")
    assert report["permissions"] == {"contents": "read", "issues": "write", "statuses": "write"}
    assert steps(report)[0]["with"]["ref"] == "${{ github.event.repository.default_branch }}"
    runs = [s.get("run", "") for s in steps(report)]
    assert any(r.startswith("bot publish --results results --ledger ") for r in runs)
    assert any(r.startswith("bot publish --cancelled ") for r in runs)
    assert steps(report)[-1]["uses"].startswith("actions/cache/save@")
    assert steps(report)[-1]["if"] == (
        "always() && (steps.publish.outcome == 'success' || "
        "steps.publish-cancelled.outcome == 'success')"
    )
    ids = {s.get("id") for s in steps(report)}
    assert {"publish", "publish-cancelled"} <= ids


def test_ci_workflow_runs_the_project_ci_script() -> None:
    ci = load("ci.yml")
    assert steps(ci["jobs"]["test"])[-1]["run"] == "bash .ci/run"
    assert ci["permissions"] == {"contents": "read"}


def test_a_missing_zizmor_fails_under_ci_and_skips_elsewhere(monkeypatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run the workflow audit"):
        test_zizmor_finds_nothing("regular")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="zizmor is not installed"):
        test_zizmor_finds_nothing("regular")
