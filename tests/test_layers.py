"""The folders' layers: `lint-imports` keeps the contracts in pyproject.toml, a module importing
upward breaks them, and docs/architecture.md's picture shows the same layers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE_FOLDERS = ("bot", "stages", "harness", "kernels", "templates")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def shim(tmp_path: Path, extra: dict[str, str] | None = None) -> Path:
    """A ``stagebot/<folder>`` tree of links to the folders, where lint-imports can find them
    (the editable install maps the folders by a finder it does not read). ``extra`` adds or
    replaces modules ("folder/sub/name.py" -> source); each folder on such a path becomes a
    folder of links."""
    package = tmp_path / "shim" / "stagebot"
    package.mkdir(parents=True)
    for folder in CODE_FOLDERS:
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    for name, source in (extra or {}).items():
        target, original = package, ROOT
        for part in Path(name).parent.parts:
            target, original = target / part, original / part
            if target.is_symlink():
                target.unlink()
                target.mkdir()
                for entry in original.iterdir():
                    (target / entry.name).symlink_to(entry)
        planted = package / name
        if planted.is_symlink():  # replace the link, never the file it points to
            planted.unlink()
        planted.write_text(source)
    return package.parent


def lint_imports(shim_root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(shim_root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_folders_keep_their_layers(tmp_path) -> None:
    result = lint_imports(shim(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "source", "broken"),
    [
        ("stages/upward.py", "import stagebot.bot.cli.main\n", "bot > harness > stages"),
        ("kernels/upward.py", "import stagebot.stages.errors\n", "kernels and templates"),
        ("templates/sideways.py", "import stagebot.kernels.errors\n", "bot > harness > stages"),
        (
            "harness/suites/edge.py",
            "from stagebot.bot.cli.local import parse\n",
            "the harness suites never import the bot edge",
        ),
    ],
)
def test_an_import_against_the_layers_breaks_a_contract(tmp_path, module, source, broken) -> None:
    result = lint_imports(shim(tmp_path, {module: source}))
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(rf"{re.escape(broken)}.* BROKEN", result.stdout), result.stdout


def contracts(kind: str) -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return [contract for contract in config["contracts"] if contract["type"] == kind]


@pytest.mark.parametrize("contract", contracts("forbidden"), ids=lambda contract: contract["id"])
def test_a_forbidden_import_breaks_its_contract(tmp_path, contract) -> None:
    """The negative control of each forbidden contract: a module planted in its first source
    package that imports its first forbidden module breaks it."""
    folder = contract["source_modules"][0].removeprefix("stagebot.").replace(".", "/")
    planted = {f"{folder}/planted_violation.py": f"import {contract['forbidden_modules'][0]}\n"}
    result = lint_imports(shim(tmp_path, planted))
    assert result.returncode == 1, result.stdout + result.stderr
    name = r"\s+".join(map(re.escape, contract["name"].split()))  # lint-imports wraps long lines
    assert re.search(rf"{name}\s+BROKEN", result.stdout), result.stdout


def test_every_subsystem_package_has_a_contract() -> None:
    """Each package of bot/ and harness/ is the source of a forbidden contract, except the two
    tops: bot/cli/ (its commands are kept apart by the independence contract) and
    harness/pipeline/ (a pipeline's life may use every other harness package)."""
    tops = {"stagebot.bot.cli", "stagebot.harness.pipeline"}
    packages = {
        f"stagebot.{init.parent.parent.name}.{init.parent.name}"
        for folder in ("bot", "harness")
        for init in (ROOT / folder).glob("*/__init__.py")
    }
    sources = {module for c in contracts("forbidden") for module in c["source_modules"]}
    assert packages - tops <= sources, sorted(packages - tops - sources)


GATE = (ROOT / "bot" / "cli" / "workflow" / "gate.py").read_text()


@pytest.mark.parametrize(
    "planted",
    [
        pytest.param(
            {
                "bot/cli/workflow/gate.py": GATE
                + "\n\ndef more():\n    from stagebot.bot.cli.local import parse\n"
            },
            id="directly, inside a function",
        ),
        pytest.param(
            {
                "bot/cli/workflow/gate.py": GATE
                + "\nfrom stagebot.bot import planted_helper  # noqa\n",
                "bot/planted_helper.py": "from stagebot.bot.cli.workflow.publish import publish\n",
            },
            id="through a module that imports a command",
        ),
    ],
)
def test_a_command_importing_another_breaks_the_independence_contract(tmp_path, planted) -> None:
    """Commands share library modules, never each other (issue 32: report-run invoked publish,
    three commands imported write_outputs from handle-event)."""
    result = lint_imports(shim(tmp_path, planted))
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"a command never imports another command.* BROKEN", result.stdout)


def test_the_independence_contract_names_every_command() -> None:
    (contract,) = contracts("independence")
    commands = {
        f"stagebot.bot.cli.{path.parent.name}.{path.stem}"
        for path in (ROOT / "bot" / "cli").glob("*/*.py")
        if path.stem != "__init__"
    }
    assert set(contract["modules"]) == commands


def pictured_layers() -> list[list[str]]:
    """The layers of docs/architecture.md's Layout picture, top first: each line that starts with a
    folder ("bot/", "kernels/ | templates/")."""
    layout = (ROOT / "docs" / "architecture.md").read_text().split("## Layout", 1)[1]
    picture = layout.split("```text\n", 1)[1].split("```", 1)[0]
    layers = []
    for line in picture.splitlines():
        match = re.match(r"^([a-z]+/(?: \| [a-z]+/)*)", line)
        if match:
            layers.append([name.strip().rstrip("/") for name in match.group(1).split("|")])
    return layers


def test_the_architecture_picture_shows_the_contracts_layers() -> None:
    (contract,) = contracts("layers")
    layers = [
        [name.strip().removeprefix("stagebot.") for name in layer.split("|")]
        for layer in contract["layers"]
    ]
    assert pictured_layers() == layers
    assert sorted(name for layer in layers for name in layer) == sorted(CODE_FOLDERS)
