"""The README's first-hour promises: its extras table lists what each extra adds, it points only
at files of the repository, it says how to get a CPU-only torch, and its test-only catalog line
works as written on a machine without torch."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest
from workflow_installs import ROOT, source_copy, venv_env

README = (ROOT / "README.md").read_text(encoding="utf-8")
EXTRA_ROW = re.compile(r"^\| `(?P<install>[^`]+)`[^|]*\|[^|]*\| (?P<adds>[^|]+) \|$", re.M)
REQUIREMENT_NAME = re.compile(r"^[A-Za-z0-9._-]+")


def _name(requirement: str) -> str:
    return REQUIREMENT_NAME.match(requirement)[0].lower().replace("_", "-")


def test_the_extras_table_lists_every_package_each_extra_adds() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {"pip install .": project["dependencies"], **{
        f"[{extra}]": requirements
        for extra, requirements in project["optional-dependencies"].items()
    }}  # fmt: skip
    rows = {
        row["install"].removesuffix(" (core)"): row["adds"] for row in EXTRA_ROW.finditer(README)
    }
    assert set(rows) == set(declared), rows
    for install, requirements in declared.items():
        listed = {_name(re.sub(r"\(.*?\)", "", item).strip()) for item in rows[install].split(",")}
        assert listed == {_name(r) for r in requirements}, install


def test_the_readme_points_only_at_files_of_the_repository() -> None:
    assert "../" not in README
    named = set(re.findall(r"`([\w./-]+\.(?:md|py|yaml|yml|toml|txt))`", README))
    missing = sorted(path for path in named if "/" in path and not (ROOT / path).exists())
    assert missing == []
    for target in re.findall(r"\]\(([^)]+)\)", README):  # markdown links
        assert target.startswith("https://") or (ROOT / target).exists(), target


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
