"""The wheel carries the data the installed `bot` reads: the stage catalog, the JSON schemas and
the report templates (data-only folders are packages too; see setup.py), and no Markdown: the
notes and READMEs beside the code (kernels/cute/NOTES.md, 85 KB) are read by people, never at run
time, so pyproject.toml keeps them out."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from workflow_installs import build_wheel, source_copy

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
NOTES = "stagebot/kernels/cute/NOTES.md"


def wheel_names(tmp_path: Path, edit_pyproject=None) -> set[str]:
    """The files of a wheel built from the tracked files, with a file list of an earlier build
    that names the Markdown beside the code (setuptools reads it back into the package data)."""
    source = source_copy(tmp_path / "src")
    earlier = source / "stagebot.egg-info" / "SOURCES.txt"
    earlier.parent.mkdir()
    earlier.write_text("kernels/cute/NOTES.md\nharness/suites/sharding_ir/README.md\n")
    if edit_pyproject:
        pyproject = source / "pyproject.toml"
        pyproject.write_text(edit_pyproject(pyproject.read_text()))
    return set(zipfile.ZipFile(build_wheel(source, tmp_path)).namelist())


def markdown(names: set[str]) -> list[str]:
    return sorted(name for name in names if name.endswith(".md"))


@pytest.fixture(scope="module")
def names(tmp_path_factory) -> set[str]:
    return wheel_names(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_carries_the_catalog_schemas_and_templates(names) -> None:
    expected = [
        f"stagebot/{path.relative_to(ROOT)}"
        for folder in ("stages/catalog", "stages/schemas", "bot/schemas", "templates")
        for path in sorted((ROOT / folder).iterdir())
        if path.is_file() and path.suffix in (".yaml", ".json", ".j2", ".txt")
    ]
    assert len(expected) >= 10, expected
    missing = [name for name in expected if name not in names]
    assert missing == [], missing


def test_the_wheel_carries_no_markdown(names) -> None:
    assert (ROOT / "kernels" / "cute" / "NOTES.md").is_file()  # there to be left out
    assert markdown(names) == []
    assert "stagebot/templates/bot_help.md.j2" in names  # a template, not a note


def test_without_the_exclusion_the_notes_ship(tmp_path) -> None:
    """The negative control: the packaging as it was ("*.md" package data, no exclusion)."""

    def as_before(text: str) -> str:
        text = re.sub(
            r'\n\[tool\.setuptools\.exclude-package-data\]\n"\*" = \["\*\.md"\]\n', "\n", text
        )
        return text.replace('"*.j2", "*.txt"]', '"*.j2", "*.txt", "*.md"]')

    assert as_before((ROOT / "pyproject.toml").read_text()).count("*.md") == 1
    assert NOTES in markdown(wheel_names(tmp_path, as_before))
