"""The workflows: zizmor (both personas, and with every ignore lifted: only the ignores in
tests/helpers/zizmor_ignores.py, with their reasons, remain) and actionlint find nothing, and the
three bot workflows keep the trust model v2 shape (SECURITY.md): PR code runs only in stage.yml,
on the stage branch, with contents: read and no secret; the privileged jobs run stagebot from the
default branch, restore no cache and download nothing with an action (artifacts of other runs go
through `bot report-run` / `bot fetch-ledger`, which check whose run made them)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from helpers.workflow_lint import WORKFLOWS, actionlint, zizmor
from helpers.zizmor_ignores import IGNORES
from workflow_installs import PRIVILEGED, ROOT, bot_jobs, unhashed_fetches

from stagebot.bot.protocols.names import PLAN_ARTIFACT, result_artifact

NAMES = ("bot.yml", "stage.yml", "report.yml", "ci.yml")
EXPRESSION = re.compile(r"\$\{\{")
HASH_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
DEFAULT_BRANCH = "${{ github.event.repository.default_branch }}"


def load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads `on` as True
    return data


def steps(job: dict) -> list[dict]:
    return job["steps"]


@pytest.mark.parametrize("persona", ["regular", "pedantic", "auditor"])
def test_zizmor_finds_nothing(persona: str) -> None:
    done = zizmor(f"--persona={persona}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout + done.stderr


def test_with_no_ignores_zizmor_finds_only_the_justified_ignores() -> None:
    done = zizmor("--persona=auditor", "--no-ignores", "--format=json")
    found = {
        (Path(f["locations"][0]["symbolic"]["key"]["Local"]["verbatim_path"]).name, f["ident"])
        for f in json.loads(done.stdout)
    }
    assert found == set(IGNORES), done.stderr
    marked = {
        (name, rule)
        for name in NAMES
        for rule in re.findall(r"zizmor: ignore\[([\w-]+)\]", (WORKFLOWS / name).read_text())
    }
    assert marked == set(IGNORES)  # no stale ignore either


def test_actionlint_finds_nothing() -> None:
    done = actionlint(*(WORKFLOWS / n for n in NAMES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_finds_a_broken_workflow(tmp_path: Path) -> None:
    """The negative control: an undefined context property and a job needing a missing job."""
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    needs: [nowhere]\n"
        "    if: github.event.nope.deeper == 'x' && steps.missing.outputs.y\n"
        "    steps:\n      - run: echo hi\n"
    )
    done = actionlint(broken)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "nowhere" in done.stdout and "missing" in done.stdout


@pytest.mark.parametrize("name", NAMES)
def test_actions_are_pinned_and_credentials_not_persisted(name: str) -> None:
    for job in load(name)["jobs"].values():
        for step in steps(job):
            if "uses" in step:
                assert HASH_PIN.match(step["uses"]), step["uses"]
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


@pytest.mark.parametrize("name", NAMES)
def test_no_expression_is_pasted_into_a_shell_script(name: str) -> None:
    for job in load(name)["jobs"].values():
        for step in steps(job):
            assert not EXPRESSION.search(step.get("run", "")), step["run"]


@pytest.mark.parametrize("name", NAMES)
def test_no_job_restores_a_cache_or_downloads_an_artifact_with_an_action(name: str) -> None:
    """v1 unpacked Actions caches that PR code could write (tar -P) and merged every
    `stagebot-result-*` artifact of its own run; now nothing is restored, and what the bot
    reads of other runs it reads through the API, after checking whose run it is."""
    text = (WORKFLOWS / name).read_text()
    assert "actions/cache" not in text and "download-artifact" not in text
    for job in load(name)["jobs"].values():
        assert not any(s.get("with", {}).get("cache") for s in steps(job))  # setup-* caches


def test_no_privileged_job_installs_anything_unhashed() -> None:
    """Issue 43, finding 2: the plan and report jobs hold the App key; every package they install
    is hash-checked: the core and build locks with --require-hashes, then the default branch's
    checkout with --no-deps (the lock holds its dependencies) and --no-build-isolation (an
    isolated build would fetch setuptools unhashed; the build lock's setuptools builds it)."""
    jobs = [job for job in bot_jobs() if job.workflow in PRIVILEGED]
    assert {job.workflow for job in jobs} == set(PRIVILEGED)
    for job in jobs:
        assert job.installs, job
        for line in job.installs:
            assert unhashed_fetches(line, ROOT) == [], (job.workflow, line)


@pytest.mark.parametrize(
    ("line", "caught"),
    [
        ("python -m pip install --quiet .", ".'s dependencies"),
        ("python -m pip install --quiet --no-deps .", ".'s build requirements"),
        ("python -m pip install 'stagebot==0.1.0'", "stagebot==0.1.0, named without a hash"),
        ("python -m pip install --quiet PyGithub jinja2", "PyGithub, named without a hash"),
        ('python -m pip install -r "$lock"', "-r $lock is not hash-checked"),
    ],
)
def test_the_unhashed_install_check_catches_each_way(line: str, caught: str) -> None:
    """The negative controls of the test above: each line fetches something unhashed."""
    assert any(caught in found for found in unhashed_fetches(line, ROOT)), line


def test_a_lock_with_one_unhashed_pin_is_not_hash_checked(tmp_path: Path) -> None:
    """pip checks hashes without --require-hashes only when every pin of the lock has one."""
    lock = tmp_path / "templates" / "locks" / "core.txt"
    lock.parent.mkdir(parents=True)
    text = (ROOT / "templates" / "locks" / "core.txt").read_text(encoding="utf-8")
    lock.write_text(text, encoding="utf-8")
    line = "python -m pip install --quiet -r templates/locks/core.txt"
    assert unhashed_fetches(line, tmp_path) == []
    lock.write_text(re.sub(r"(?m)^(jinja2==\S+) \\\n(    --hash=.*\n)*", r"\1\n", text))
    assert unhashed_fetches(line, tmp_path) == [
        "-r templates/locks/core.txt is not hash-checked (add --require-hashes)"
    ]


def test_only_the_stage_workflow_runs_pr_code_and_how() -> None:
    """A checkout of anything but the default branch happens only in stage.yml, of the pinned
    commit from the bot's matrix, in a job with contents: read, no secret and no token."""
    for name in ("bot.yml", "report.yml"):
        for job in load(name)["jobs"].values():
            for step in steps(job):
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert step["with"]["ref"] == DEFAULT_BRANCH, name
    stage = load("stage.yml")
    assert list(stage["on"]) == ["workflow_dispatch"]  # never pull_request: its file is the PR's
    assert stage["permissions"] == {}
    (job,) = stage["jobs"].values()
    assert job["permissions"] == {"contents": "read"}
    assert job["strategy"]["matrix"]["entry"] == "${{ fromJSON(inputs.matrix) }}"
    assert job["runs-on"] == "${{ matrix.entry.runner_labels }}"
    text = (WORKFLOWS / "stage.yml").read_text()
    assert "secrets." not in text and "github.token" not in text and "GITHUB_TOKEN" not in text
    assert "environment" not in job
    checkout = steps(job)[0]
    assert checkout["with"]["ref"] == "${{ matrix.entry.commit }}"
    run = next(s for s in steps(job) if "run-stage" in s.get("run", ""))
    assert run["env"]["ENTRY"] == "${{ toJSON(matrix.entry) }}"
    upload = steps(job)[-1]
    assert upload["if"] == "always()" and upload["with"]["path"] == "results/"
    assert upload["with"]["name"] == result_artifact("${{ matrix.entry.stage }}")


def test_the_stage_runs_title_is_what_the_report_parses() -> None:
    from stagebot.bot.protocols.names import parse_title, stage_title

    stage = load("stage.yml")
    assert set(stage["on"]["workflow_dispatch"]["inputs"]) == {
        "plan-run",
        "pipeline",
        "key",
        "part",
        "matrix",
    }
    rendered = re.sub(
        r"\$\{\{ inputs\.([\w-]+) \}\}",
        lambda m: {"key": "pr-7", "pipeline": "101", "plan-run": "555", "part": "3"}[m[1]],
        stage["run-name"],
    )
    assert rendered == stage_title(7, 101, 555, 3) and parse_title(rendered) == ("pr-7", 101, 555)


def test_which_job_holds_which_permission() -> None:
    bot, report = load("bot.yml"), load("report.yml")
    assert bot["permissions"] == {} and report["permissions"] == {}
    assert bot["jobs"]["plan"]["permissions"] == {
        "contents": "read",
        "issues": "write",
        "pull-requests": "read",
        "statuses": "write",
        "actions": "write",
    }
    assert report["jobs"]["report"]["permissions"] == {
        "contents": "read",
        "actions": "write",  # fail-fast cancels stage runs; the job runs no PR code
        "issues": "write",
        "statuses": "write",
    }
    # the App's private key only in the privileged jobs, through an environment
    for job in (bot["jobs"]["plan"], report["jobs"]["report"]):
        assert job["environment"] == "stagebot"


def test_bot_workflow_triggers_and_the_plan_jobs_steps() -> None:
    workflow = load("bot.yml")
    assert workflow["on"]["issue_comment"] == {"types": ["created"]}
    assert workflow["on"]["push"] == {"branches": ["main"]}
    plan = workflow["jobs"]["plan"]
    runs = [s["run"] for s in steps(plan) if "run" in s]
    assert runs == [
        "python -m pip install --quiet --require-hashes -r templates/locks/core.txt "
        "-r templates/locks/build.txt\n"
        "python -m pip install --quiet --no-deps --no-build-isolation .\n",
        "bot gate",
        "bot app-token --job plan",
        "bot fetch-ledger --out .stagebot/ledger.sqlite",
        "bot handle-event --ledger .stagebot/ledger.sqlite --out .stagebot/plan",
        "bot dispatch --plan-dir .stagebot/plan",
    ]
    uploads = {s["with"]["name"]: s for s in steps(plan) if "upload-artifact" in s.get("uses", "")}
    # the names are bot/protocols/names.py's: the constant, and the one handle-event formats
    assert set(uploads) == {PLAN_ARTIFACT, "${{ steps.handle.outputs.ledger_artifact }}"}


def test_the_plan_job_refuses_cheaply_before_it_mints_the_apps_token() -> None:
    """Issue 28, finding 8: `bot gate` (the job's own GITHUB_TOKEN, at most one read) runs
    first; no later step runs, and no App token is minted, unless it said proceed."""
    plan = load("bot.yml")["jobs"]["plan"]
    names = [s.get("run", "") for s in steps(plan)]
    gate = names.index("bot gate")
    assert gate < names.index("bot app-token --job plan")
    assert steps(plan)[gate]["env"] == {"GITHUB_TOKEN": "${{ github.token }}"}
    for step in steps(plan)[gate + 1 :]:
        condition = step.get("if", "")
        assert "steps.gate.outputs.proceed == 'true'" in condition or "steps.handle." in condition


def test_report_runs_on_the_stage_workflow() -> None:
    report = load("report.yml")
    assert report["on"] == {"workflow_run": {"workflows": ["stage"], "types": ["completed"]}}
    assert load("stage.yml")["name"] == "stage"
    assert list(report["jobs"]) == ["report"]
    job = report["jobs"]["report"]
    run = next(s for s in steps(job) if s.get("id") == "report")
    assert run["run"] == 'bot report-run --run-id "$RUN_ID" --work .stagebot'
    assert run["env"]["RUN_ID"] == "${{ github.event.workflow_run.id }}"
    upload = steps(job)[-1]
    assert upload["if"] == "steps.report.outputs.published == 'true'"


@pytest.mark.parametrize("name", ["bot.yml", "stage.yml", "report.yml"])
def test_no_bot_workflow_can_be_cancelled_through_a_concurrency_group(name: str) -> None:
    """Issue 28, finding 3: a group name is repository-wide and predictable, so a workflow in a
    fork PR can join it with cancel-in-progress and cancel the bot's stage or report run (and
    GitHub cancels an older pending run whenever a newer one joins). No bot workflow or job has
    a group; the report also takes nothing from a run's title before verifying it."""
    workflow = load(name)
    groups = [workflow.get("concurrency")] + [
        j.get("concurrency") for j in workflow["jobs"].values()
    ]
    assert groups == [None] * len(groups)
    assert "display_title" not in (WORKFLOWS / name).read_text()


def test_ci_workflow_runs_the_project_ci_script() -> None:
    ci = load("ci.yml")
    assert steps(ci["jobs"]["test"])[-1]["run"] == "bash .ci/run"
    assert ci["permissions"] == {"contents": "read"}


def test_a_missing_tool_fails_under_ci_and_skips_elsewhere(monkeypatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run the workflow audit"):
        test_zizmor_finds_nothing("regular")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="actionlint is not installed"):
        test_actionlint_finds_nothing()
