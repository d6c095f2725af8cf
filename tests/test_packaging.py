"""The wheel carries the data the installed `bot` reads: the stage catalog, the JSON schemas and
the report templates (data-only folders are packages too; see setup.py)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from workflow_installs import build_wheel, source_copy

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_the_wheel_carries_the_catalog_schemas_and_templates(tmp_path) -> None:
    wheel = build_wheel(source_copy(tmp_path / "src"), tmp_path)
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
