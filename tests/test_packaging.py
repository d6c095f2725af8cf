"""The wheel carries the data the installed `bot` reads: the stage catalog, the JSON schemas and
the report templates (data-only folders are packages too; see setup.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _source_copy(into: Path) -> Path:
    """The tracked files only: a build/ folder left by an earlier in-tree build would leak into
    the wheel and hide what the packaging itself includes."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def test_the_wheel_carries_the_catalog_schemas_and_templates(tmp_path) -> None:
    source = _source_copy(tmp_path / "src")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = tmp_path.glob("stagebot-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = [
        f"stagebot/{path.relative_to(ROOT)}"
        for folder in ("stages/catalog", "stages/schemas", "bot/schemas", "templates")
        for path in sorted((ROOT / folder).iterdir())
        if path.is_file() and path.suffix in (".yaml", ".json", ".j2", ".txt")
    ]
    assert len(expected) >= 10, expected
    missing = [name for name in expected if name not in names]
    assert missing == [], missing
