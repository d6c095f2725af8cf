"""`bot init`: stagebot's own workflows are what it generates (a stale one fails), and in the
sample repository (tests/fixtures/sample_repo) it writes settings, a catalog and workflows that
load, plan and keep the trust model's shape; re-running changes nothing unless --write."""

# ruff: noqa: F401, F811 - pytest fixtures imported from the helper that defines them
from __future__ import annotations

import hashlib
import json
import shutil
from importlib.metadata import version
from pathlib import Path

import yaml
from helpers.adoption import adopted, fake_release, sample_copy
from helpers.cli import bot
from helpers.workflow_lint import actionlint, zizmor
from workflow_installs import PRIVILEGED, bot_jobs, unhashed_fetches

import stagebot.harness
from stagebot.bot.comments.grammar import parse_comment
from stagebot.harness.run.shard import pytest_argv
from stagebot.stages.catalog import load_catalog
from stagebot.stages.matrix import matrix_entries
from stagebot.stages.planner import plan_run

ROOT = Path(__file__).resolve().parents[3]
WORKFLOWS = ("bot.yml", "stage.yml", "report.yml")


def test_stagebots_own_workflows_are_what_bot_init_generates(capsys) -> None:
    code, out, err = bot(capsys, "init", "--root", str(ROOT))
    assert code == 0 and "everything is up to date" in out, out + err


def own_copy(tmp_path: Path) -> Path:
    """stagebot's settings and workflows, in a folder of their own."""
    shutil.copytree(ROOT / ".github", tmp_path / ".github")
    return tmp_path


def test_a_stale_workflow_fails_the_check_with_its_diff_and_write_fixes_it(
    tmp_path, capsys
) -> None:
    """The negative control of the staleness check: a workflow edited by hand."""
    repo = own_copy(tmp_path)
    stage = repo / ".github/workflows/stage.yml"
    stage.write_text(stage.read_text().replace("bot stage-setup", "pip install '.[harness]' #"))
    code, out, _ = bot(capsys, "init", "--root", str(repo))
    assert code == 1, out
    assert "update    .github/workflows/stage.yml" in out
    assert "-        run: pip install '.[harness]' #" in out
    assert "+        run: bot stage-setup" in out
    assert "run `bot init --write`" in out
    code, out, _ = bot(capsys, "init", "--root", str(repo), "--write")
    assert code == 0, out
    code, out, _ = bot(capsys, "init", "--root", str(repo))
    assert code == 0 and "everything is up to date" in out, out


def test_changed_settings_make_the_workflows_stale(tmp_path, capsys) -> None:
    repo = own_copy(tmp_path)
    settings = repo / ".github/stagebot-init.yml"
    settings.write_text(settings.read_text().replace("python: '3.11'", "python: '3.12'"))
    code, out, _ = bot(capsys, "init", "--root", str(repo))
    assert code == 1
    assert '+          python-version: "3.12"' in out


def test_init_writes_settings_a_catalog_and_workflows_that_load(adopted, tmp_path) -> None:
    catalog = load_catalog(adopted / ".github/stagebot/catalog")
    assert {f.name: [s.to_json() for s in f.suites] for f in catalog.families} == {
        "CPU-Python-Core": [{"path": "tests/core", "marks": None, "keyword": None, "args": []}],
        "CPU-Python-Ops": [{"path": "tests/ops", "marks": "not gpu", "keyword": None, "args": []}],
        "DGX_H200-Python-Ops": [{"path": "tests/ops", "marks": "gpu", "keyword": None, "args": []}],
    }
    assert catalog.stage("CPU-Python-Core-1").setup.extras == ("test",)
    assert {f.name: f.skip_if_only_changed for f in catalog.families} == {
        "CPU-Python-Core": (),
        "CPU-Python-Ops": (),
        "DGX_H200-Python-Ops": ("**/*.md", "docs/**", "tests/core/**"),  # GPU time saved
    }
    assert "ephemeral" in catalog.gpu_types["DGX_H200"].runner_labels
    settings = yaml.safe_load((adopted / ".github/stagebot-init.yml").read_text())
    digest = hashlib.sha256(b"stand-in wheel bytes").hexdigest()
    assert settings["stagebot"] == {
        "version": "0.1.0",
        "sha256": digest,
        "requirement": "stagebot==0.1.0",
    }
    assert settings["catalog"] == ".github/stagebot/catalog"


def test_the_privileged_jobs_install_the_pinned_release_never_the_checkout(adopted) -> None:
    for name in WORKFLOWS:
        workflow = yaml.safe_load((adopted / ".github/workflows" / name).read_text())
        for job in workflow["jobs"].values():
            scripts = "\n".join(step.get("run", "") for step in job["steps"])
            installs = [line for line in scripts.splitlines() if "pip install" in line]
            assert "--require-hashes" in installs[0] and "--no-deps" in installs[0], installs
            # its dependencies: the release's own core lock, every one with its hashes
            assert installs[1:] == ['python -m pip install --quiet --require-hashes -r "$lock"']
            assert 'files("stagebot.templates") / "locks" / "core.txt"' in scripts
            assert "sha256:" + hashlib.sha256(b"stand-in wheel bytes").hexdigest() in scripts
            assert "install --quiet ." not in scripts  # the checkout is data, never the bot
    plan = yaml.safe_load((adopted / ".github/workflows/bot.yml").read_text())["jobs"]["plan"]
    handle = next(s["run"] for s in plan["steps"] if "handle-event" in s.get("run", ""))
    assert handle.startswith("bot handle-event --catalog .github/stagebot/catalog ")


def test_the_generated_privileged_jobs_install_nothing_unhashed(adopted) -> None:
    """Issue 43, finding 2, in what `bot init` generates: the pinned release by its sha256
    without dependencies, then the release's own core lock with --require-hashes."""
    jobs = [job for job in bot_jobs(adopted / ".github/workflows") if job.workflow in PRIVILEGED]
    assert {job.workflow for job in jobs} == set(PRIVILEGED)
    for job in jobs:
        assert len(job.installs) == 2, job
        for line in job.installs:
            assert unhashed_fetches(line, adopted) == [], (job.workflow, line)


def test_the_generated_workflows_pass_zizmor_and_actionlint(adopted) -> None:
    folder = adopted / ".github" / "workflows"
    done = zizmor("--persona=auditor", folder=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    done = actionlint(*(folder / name for name in WORKFLOWS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_re_running_init_changes_nothing_and_keeps_the_users_edits(
    adopted, tmp_path, capsys
) -> None:
    stages = adopted / ".github/stagebot/catalog/stages.yaml"
    stages.write_text(stages.read_text().replace("timeout_minutes: 30", "timeout_minutes: 45"))
    before = {p: p.read_bytes() for p in adopted.rglob("*") if p.is_file()}
    code, out, _ = bot(capsys, "init", "--root", str(adopted))
    assert code == 0 and "everything is up to date" in out, out
    code, out, _ = bot(capsys, "init", "--root", str(adopted), "--write")
    assert {p: p.read_bytes() for p in adopted.rglob("*") if p.is_file()} == before


def test_a_new_release_updates_the_pin_and_shows_it(adopted, tmp_path, capsys) -> None:
    newer = tmp_path / "dist" / "stagebot-0.2.0-py3-none-any.whl"
    newer.write_bytes(b"the next release")
    code, out, _ = bot(capsys, "init", "--root", str(adopted), "--stagebot-wheel", str(newer))
    assert code == 1
    assert "update    .github/stagebot-init.yml" in out
    assert "+          printf '%s\\n' 'stagebot==0.2.0 --hash=sha256:" in out


def test_init_without_a_pin_or_tests_says_what_to_give(tmp_path, capsys) -> None:
    repo = sample_copy(tmp_path)
    code, _, err = bot(capsys, "init", "--root", str(repo))
    assert code == 2 and "give --stagebot-wheel FILE" in err
    shutil.rmtree(repo / "tests")
    code, _, err = bot(
        capsys, "init", "--root", str(repo), "--stagebot-wheel", str(fake_release(tmp_path))
    )
    assert code == 2 and "no tests/ folder" in err


def test_areas_of_a_tests_folder_with_files_and_folders_run_once_gpu_ones_skip_others(
    tmp_path, capsys
) -> None:
    repo = tmp_path / "repo"
    (repo / "tests" / "kernels").mkdir(parents=True)
    (repo / "tests" / "test_api.py").write_text("def test_api():\n    pass\n")
    (repo / "tests" / "kernels" / "test_mm.py").write_text(
        "import pytest\n\n\n@pytest.mark.gpu\ndef test_mm():\n    pass\n"
    )
    code, out, err = bot(
        capsys, "init", "--root", str(repo), "--stagebot-wheel", str(fake_release(tmp_path)),
        "--write",
    )  # fmt: skip
    assert code == 0, out + err
    catalog = load_catalog(repo / ".github/stagebot/catalog")
    skips = {f.name: f.skip_if_only_changed for f in catalog.families}
    assert skips["DGX_H200-Python-Kernels"] == ("**/*.md", "docs/**", "tests/test_*.py")
    # tests/'s own family runs its top-level files, not tests/kernels' (the GPU test among them)
    (suite,) = catalog.stage("CPU-Python-Tests-1").suites
    assert suite.pytest_args() == ["tests", "--ignore=tests/kernels"]


BUILTIN_FAMILY = """\
  - name: DGX_H200-4_GPUs-AutoDeploy
    kind: test
    timeout_minutes: 60
    suites: [{builtin: sharding_ir, args: [--sharding-ir-model-id, all]}]
"""


def test_a_users_catalog_runs_stagebots_built_in_suites_by_name(adopted, capsys) -> None:
    """A family of the sample's own and an `attach` fragment name stagebot's suites: the plan
    carries each by name, the stage job finds it in its installed stagebot (tests named as
    stagebot's pipelines name them) and installs stagebot's [harness] extra at this version."""
    catalog = adopted / ".github/stagebot/catalog"
    (catalog / "stages.yaml").write_text((catalog / "stages.yaml").read_text() + BUILTIN_FAMILY)
    (catalog / "suite_moe.yaml").write_text(
        "attach:\n  - {families: [CPU-Python-Ops], suites: [{builtin: nvfp4_moe}]}\n"
    )
    command = "/bot run --add-multi-gpu-test"
    code, out, err = bot(capsys, "dry-run", "--json", "--catalog", str(catalog), command)
    assert code == 0, out + err
    suites = {shard["stage"]: shard["suites"] for shard in json.loads(out)["shards"]}
    assert suites["DGX_H200-4_GPUs-AutoDeploy-1"] == [
        {
            "path": "harness/suites/sharding_ir",
            "marks": None,
            "keyword": None,
            "args": ["--sharding-ir-model-id", "all"],
            "builtin": "sharding_ir",
        }
    ]
    loaded = load_catalog(catalog)
    plan = plan_run(parse_comment(command), loaded, commit="c" * 40)
    entries = {e.stage: e for e in matrix_entries(plan, loaded, 1)}
    ops = entries["CPU-Python-Ops-1"]
    own, moe = pytest_argv(ops, "python")
    assert own[-3:] == ["tests/ops", "-m", "not gpu"]  # the sample's tests: a session of their own
    package = Path(stagebot.harness.__file__).parents[1]  # the installed stagebot
    assert moe[-3:] == ["--rootdir", str(package), str(package / "harness/suites/nvfp4_moe")]
    assert (package / "harness/suites/nvfp4_moe/conftest.py").is_file()
    code, out, err = bot(capsys, "stage-setup", "--print", "--entry", json.dumps(ops.to_json()))
    assert code == 0, out + err
    assert out.splitlines() == [  # stagebot's lock for its suites, the runner's torch if none
        f"python -m pip install --quiet -r {package / 'templates/locks/harness.txt'}",
        "python -m pip install --quiet '.[test]'",
        "python -m pip install --quiet 'torch<2.14,>=2.11'",
    ]
    assert entries["CPU-Python-Core-1"].setup["install"] == []  # only where a built-in runs
