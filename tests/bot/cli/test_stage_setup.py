"""A stage's setup (stages/setup.py): declared in the catalog at three levels, merged into the
matrix entry, run by `bot stage-setup` in the stage job (the workflows write no install line)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.cli import bot

from stagebot.bot.cli.main import cli
from stagebot.stages.catalog import load_catalog
from stagebot.stages.errors import CatalogError

EXAMPLE = Path(__file__).parents[3] / "stages/schemas/examples/matrix_entry.v1.json"

CATALOG = """\
setup: {extras: [harness], env: {LEVEL: catalog, KEEP: "yes"}}
gpu_types:
  CPU: {runner_labels: [ubuntu-latest]}
  H200:
    device_names: ["NVIDIA H200"]
    runner_labels: [gpu]
    setup: {extras: [kernels], install: ["echo gpu"], env: {LEVEL: gpu}}
families:
  - {name: CPU-PyTorch, kind: test, timeout_minutes: 5, suites: [{path: tests}]}
  - name: H200-PyTorch
    kind: test
    timeout_minutes: 5
    suites: [{path: tests}]
    setup: {extras: [harness, extra2], install: ["echo family"], env: {LEVEL: family}}
"""


def catalog(tmp_path: Path, text: str = CATALOG):
    (tmp_path / "catalog.yaml").write_text(text)
    return load_catalog(tmp_path / "catalog.yaml")


def test_the_catalog_the_gpu_type_and_the_family_merge_in_that_order(tmp_path) -> None:
    loaded = catalog(tmp_path)
    gpu = loaded.stage("H200-PyTorch-1").setup
    assert gpu.extras == ("harness", "kernels", "extra2")
    assert gpu.install == ("echo gpu", "echo family")
    assert dict(gpu.env) == {"LEVEL": "family", "KEEP": "yes"}
    assert gpu.commands() == [
        "python -m pip install --quiet '.[harness,kernels,extra2]'",
        "echo gpu",
        "echo family",
    ]
    cpu = loaded.stage("CPU-PyTorch-1").setup
    assert cpu.commands() == ["python -m pip install --quiet '.[harness]'"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("[harness]", "['harness; rm -rf /']"), "setup extra 'harness; rm -rf /' is not an extra"),
        (('KEEP: "yes"', "PATH: /tmp"), "setup env 'PATH' is not a name a stage may set"),
        (('KEEP: "yes"', "GITHUB_TOKEN: x"), "setup env 'GITHUB_TOKEN' is not a name"),
        (("LEVEL: gpu", "LEVEL: 1"), "'LEVEL' must be str"),
        (("install: [", "installs: ["), "unknown key 'installs'"),
    ],
)
def test_a_bad_setup_names_the_file_line_and_what_is_right(tmp_path, change, message) -> None:
    with pytest.raises(CatalogError, match="catalog.yaml:") as raised:
        catalog(tmp_path, CATALOG.replace(*change, 1))
    assert message in str(raised.value)


def entry_json(tmp_path: Path, stage: str) -> dict:
    """The example matrix entry, for ``stage`` of the catalog above, with its merged setup."""
    from stagebot.stages.plan import MatrixEntry

    data = json.loads(EXAMPLE.read_text())
    data.update(stage=stage, setup=catalog(tmp_path).stage(stage).setup.to_json())
    return MatrixEntry.from_json(data).to_json()


def test_stage_setup_installs_the_project_runs_the_commands_and_hands_on_the_env(
    tmp_path, monkeypatch
) -> None:
    """The real thing: pip installs a tiny project (into a fresh venv, not this one), the
    install command sees the env, and $GITHUB_ENV gets it for the job's later steps."""
    data = entry_json(tmp_path, "H200-PyTorch-1")
    data["setup"].update(extras=[], install=['echo "$LEVEL" > level.txt'])
    repo = tmp_path / "repo"
    (repo / "tiny").mkdir(parents=True)
    (repo / "tiny" / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text('[project]\nname = "tiny"\nversion = "1"\n')
    monkeypatch.chdir(repo)
    github_env = tmp_path / "github_env"
    github_env.write_text("")
    monkeypatch.setenv("GITHUB_ENV", str(github_env))
    venv = tmp_path / "venv"  # the job's Python: a fresh one, so nothing lands in ours
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    monkeypatch.setenv("PATH", f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    printed = CliRunner().invoke(cli, ["stage-setup", "--print", "--entry", json.dumps(data)])
    assert printed.exit_code == 0, printed.output
    assert printed.output.splitlines() == [
        "export LEVEL=family",
        "export KEEP=yes",
        "python -m pip install --quiet .",
        'echo "$LEVEL" > level.txt',
    ]
    done = CliRunner().invoke(cli, ["stage-setup", "--entry", json.dumps(data)])
    assert done.exit_code == 0, done.output
    installed = subprocess.run(
        [venv / "bin" / "python", "-c", "import tiny; print(tiny.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert "site-packages" in installed.stdout, installed.stderr
    assert (repo / "level.txt").read_text() == "family\n"
    assert github_env.read_text() == "LEVEL=family\nKEEP=yes\n"


def test_a_failing_setup_command_is_the_runners_error_and_stops(
    tmp_path, monkeypatch, capsys
) -> None:
    data = entry_json(tmp_path, "H200-PyTorch-1")
    data["setup"].update(extras=[], install=["exit 7", "touch after.txt"])
    monkeypatch.chdir(tmp_path)  # no project here: pip itself fails first
    code, _, err = bot(capsys, "stage-setup", "--entry", json.dumps(data))
    assert code == 3, err
    assert "setup command failed with exit status 1: python -m pip install --quiet ." in err
    assert not (tmp_path / "after.txt").exists()


def test_an_entry_whose_setup_the_catalog_would_refuse_is_refused(tmp_path, capsys) -> None:
    """The entry travels as a dispatch input: checked again as the catalog checks it."""
    data = entry_json(tmp_path, "H200-PyTorch-1")
    data["setup"]["env"] = {"LD_PRELOAD": "/tmp/x.so"}
    code, _, err = bot(capsys, "stage-setup", "--print", "--entry", json.dumps(data))
    assert code == 2, err
    assert "setup env 'LD_PRELOAD' is not a name a stage may set" in err
    data["setup"] = {"extras": [["harness"]], "install": [], "env": {}}
    code, _, err = bot(capsys, "stage-setup", "--print", "--entry", json.dumps(data))
    assert code == 2 and "setup must be a mapping of extras and install (lists of strings)" in err
