"""`bot init` in a realistic repository (tests/helpers/sample_project.py) reads what the stage jobs
will need that a bare checkout and `pip install .[test]` do not give (its submodule, its LFS
files, the extra and the requirement file its tests' imports come from), generates it or says
what to add, and names the stages from what the tests use; `bot doctor` checks the same."""

from __future__ import annotations

import json

import yaml
from helpers.sample_project import adopted_sample, bot, build_sample

from stagebot.stages.catalog import load_catalog


def _checkout_step(repo) -> dict:
    stage = yaml.safe_load((repo / ".github/workflows/stage.yml").read_text())
    steps = stage["jobs"]["stage"]["steps"]
    return next(step for step in steps if step.get("name") == "Check out the pinned commit")


def _doctor(repo) -> dict[str, dict]:
    done = bot(repo, "doctor", "--json", env={"GITHUB_TOKEN": ""})
    return {check["name"]: check for check in json.loads(done.stdout)}


def test_the_stage_checkout_brings_the_submodules_and_the_lfs_files(tmp_path) -> None:
    repo = adopted_sample(tmp_path)
    settings = yaml.safe_load((repo / ".github/stagebot-init.yml").read_text())
    assert settings["submodules"] is True and settings["lfs"] is True
    step = _checkout_step(repo)
    assert step["with"]["submodules"] == "recursive" and step["with"]["lfs"] is True
    assert _doctor(repo)["stage-needs"]["ok"]
    # the negative control: settings without them leave the submodule's test failing on a runner
    text = (repo / ".github/stagebot-init.yml").read_text()
    (repo / ".github/stagebot-init.yml").write_text(text.replace("submodules: true\n", ""))
    assert bot(repo, "init", "--write").returncode == 0
    assert "submodules" not in _checkout_step(repo)["with"]
    check = _doctor(repo)["stage-needs"]
    assert not check["ok"] and ".gitmodules lists submodules" in check["detail"]
    assert "add `submodules: true` to .github/stagebot-init.yml" in check["fix"]


def test_each_area_installs_what_its_tests_import(tmp_path) -> None:
    repo = adopted_sample(tmp_path)
    catalog = load_catalog(repo / ".github/stagebot/catalog")
    setups = {family.name: family.setup for family in catalog.families}
    # torch, which tests/ops imports, comes only with the `gpu` extra: both ops families get it
    assert setups["DGX_H200-PyTorch-Ops"].extras == ("test", "gpu")
    assert setups["CPU-PyTorch-Ops"].extras == ("test", "gpu")
    assert setups["CPU-PyTorch-Core"].extras == ("test",)
    # hypothesis, which tests/core imports, only tests/requirements.txt lists: every stage has it
    assert "python -m pip install --quiet -r tests/requirements.txt" in (
        setups["CPU-PyTorch-Core"].install
    )
    # the repository's own modules (tools/, the src/ package, the test helpers) are no need
    assert _doctor(repo)["stage-needs"]["ok"]
    stages = repo / ".github/stagebot/catalog/stages.yaml"
    stages.write_text(stages.read_text().replace('    setup: {extras: ["gpu"]}\n', ""))
    check = _doctor(repo)["stage-needs"]
    assert not check["ok"]
    assert (
        "CPU-PyTorch-Ops: tests/ops imports torch, which its setup does not install"
        in (check["detail"])
    )


def test_an_import_nothing_lists_is_named_with_what_to_add(tmp_path) -> None:
    repo = build_sample(tmp_path)
    (repo / "tests/requirements.txt").write_text("# nothing yet\n")
    wheel = tmp_path / "stagebot-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"stand-in")
    done = bot(repo / "tests", "init", "--stagebot-wheel", str(wheel))  # from a subfolder
    assert done.returncode == 1
    assert (
        "to add: tests/core imports hypothesis, which no extra or requirement file of gridkit "
        "lists: add them to the `test` extra"
    ) in done.stdout
    assert "tests/ops imports" not in done.stdout, "torch is the gpu extra's"
    assert not (repo / "tests/.github").exists(), "init works on the repository's root"


def test_stage_names_say_what_the_tests_use(tmp_path) -> None:
    torch_repo = adopted_sample(tmp_path / "with")
    plain_repo = adopted_sample(tmp_path / "without", torch=False)
    names = {
        repo: [f.name for f in load_catalog(repo / ".github/stagebot/catalog").families]
        for repo in (torch_repo, plain_repo)
    }
    assert names[torch_repo] == [
        "CPU-PyTorch-Core",
        "DGX_H200-PyTorch-Core",
        "CPU-PyTorch-Ops",
        "DGX_H200-PyTorch-Ops",
    ]
    assert names[plain_repo] == [
        "CPU-Python-Core",
        "DGX_H200-Python-Core",
        "CPU-Python-Ops",
        "DGX_H200-Python-Ops",
    ]
    stages = (plain_repo / ".github/stagebot/catalog/stages.yaml").read_text()
    assert "To rename a family, edit its name here (keep the GPU type" in stages
    plan = bot(plain_repo, "dry-run", "--json", "/bot run --test-backend python")
    assert plan.returncode == 0, plan.stderr
    assert {s["stage"] for s in json.loads(plan.stdout)["shards"]} == {
        "CPU-Python-Core-1",
        "DGX_H200-Python-Core-1",
        "CPU-Python-Ops-1",
        "DGX_H200-Python-Ops-1",
    }
