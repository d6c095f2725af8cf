"""The README is a page: what stagebot is, the quick start, the four commands users type and the
links, no measurements (those are in docs/benchmarks.md). Its first-hour promises: the extras
table lists what each extra adds, it points only at files of the repository, it says how to get a
CPU-only torch, and its test-only catalog line works as written on a machine without torch."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest
from workflow_installs import ROOT, source_copy, venv_env

from stagebot.bot.cli.main import COMMANDS
from stagebot.bot.comments.grammar import SUBCOMMANDS

README = (ROOT / "README.md").read_text(encoding="utf-8")
SECTIONS = [
    "Quick start (a fresh machine, from the repository root)",
    "The four commands you type",
    "Documentation",
]
# A figure measured somewhere: a commit it was measured at, or a duration.
MEASUREMENT = re.compile(r"\b(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b|\b\d+(?:\.\d+)? ?(?:min|s|ms)\b")
QUICK_START_COMMANDS = [
    "pip install torch==2.13.0 && pip install -r templates/locks/harness.txt && "
    "pip install --no-deps -e . && bot run '/bot run --stage-list \"CPU-PyTorch-1\"'",
    "pip install torch==2.13.0 && pip install -r templates/locks/dev.txt && "
    "pip install --no-deps -e . && python3 -m pytest",
]
EXTRA_ROW = re.compile(r"^\| `(?P<install>[^`]+)`[^|]*\|[^|]*\| (?P<adds>[^|]+) \|$", re.M)
REQUIREMENT_NAME = re.compile(r"^[A-Za-z0-9._-]+")


def _name(requirement: str) -> str:
    return REQUIREMENT_NAME.match(requirement)[0].lower().replace("_", "-")


def test_the_readme_is_a_page() -> None:
    assert re.findall(r"^## (.+)$", README, re.M) == SECTIONS
    assert len(README) < 8_000, "the manual belongs in docs/"


def test_the_quick_start_holds_the_two_commands() -> None:
    """The main job and the test command, each a bash block of its own (the test command's pytest
    options may grow)."""
    quick_start = README.split("## Quick start")[1].split("\n## ")[0]
    blocks = re.findall(r"^```bash\n(.*?)\n```$", quick_start, re.M | re.S)
    assert len(blocks) == 2, blocks
    assert blocks[0] == QUICK_START_COMMANDS[0]
    assert blocks[1].startswith(QUICK_START_COMMANDS[1]), blocks[1]


def test_the_readme_holds_no_measurements() -> None:
    assert MEASUREMENT.findall(README) == []


def test_a_measurement_is_recognised() -> None:
    """The negative control: the figures the README used to carry."""
    old = (
        "this command at 8a27297 took 9 min 3 s; at 9396645 … 1635 passed in 27 min 20 s; "
        "48.0 / 55.7 s cold; at most 0.4 s for 1 MB"
    )
    assert MEASUREMENT.findall(old) == [
        "8a27297", "9 min", "3 s", "9396645", "27 min", "20 s", "55.7 s", "0.4 s"
    ]  # fmt: skip


def test_the_four_commands_are_the_declared_ones() -> None:
    table = README.split("## The four commands you type")[1].split("\n## ")[0]
    typed = re.findall(r"^\| `([^`]+)` \|", table, re.M)
    assert len(typed) == 4, typed
    for command in typed:
        program, name, *_ = command.split()
        if program == "/bot":
            assert command == SUBCOMMANDS[name].usage
        else:
            assert program == "bot" and name in COMMANDS, command


def test_the_extras_table_lists_every_package_each_extra_adds() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {"pip install .": project["dependencies"], **{
        f"[{extra}]": requirements
        for extra, requirements in project["optional-dependencies"].items()
    }}  # fmt: skip
    rows = {
        row["install"].removesuffix(" (core)"): row["adds"]
        for row in EXTRA_ROW.finditer(README.split("### Extras")[1].split("\n## ")[0])
    }
    assert set(rows) == set(declared), rows
    for install, requirements in declared.items():
        listed = {_name(re.sub(r"\(.*?\)", "", item).strip()) for item in rows[install].split(",")}
        assert listed == {_name(r) for r in requirements}, install


def test_the_readme_points_only_at_files_of_the_repository() -> None:
    assert "../" not in README
    named = set(re.findall(r"`([\w./-]+\.(?:md|py|yaml|yml|toml|txt))`", README))
    missing = sorted(path for path in named if "/" in path and not (ROOT / path).exists())
    assert missing == []  # its links: tests/test_docs.py


def test_the_readme_says_how_to_get_a_cpu_only_torch() -> None:
    quick_start = README.split("## Quick start")[1].split("### Extras")[0]
    assert "--index-url https://download.pytorch.org/whl/cpu" in quick_start


@pytest.mark.slow
def test_the_test_only_catalog_line_works_as_written_without_torch(tmp_path) -> None:
    """A fresh virtual environment, no torch: the README's line, run as written in a checkout."""
    (line,) = [
        found
        for found in re.findall(r"^`(pip install [^`]+)`", README, re.M)
        if "--catalog tests/fixtures/catalog" in found
    ]
    checkout = source_copy(tmp_path / "checkout")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = venv_env(venv)
    done = subprocess.run(
        ["bash", "-c", line], cwd=checkout, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"$ {line}\n{done.stdout}{done.stderr}"
    assert "completed with state SUCCESS" in done.stdout
    torch = subprocess.run(
        ["python", "-c", "import torch"], env=env, capture_output=True, text=True, timeout=60
    )
    assert torch.returncode != 0, "the environment had torch: the line was not tried without it"
