"""The sample repository (tests/fixtures/sample_repo) adopted with `bot init`, for the init,
doctor and adoption-flow tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers.cli import bot

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "sample_repo"


def fake_release(tmp_path: Path) -> Path:
    """A file named like a stagebot wheel: `bot init` only hashes it."""
    wheel = tmp_path / "dist" / "stagebot-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"stand-in wheel bytes")
    return wheel


def sample_copy(tmp_path: Path) -> Path:
    repo = tmp_path / "sample"
    shutil.copytree(SAMPLE, repo)
    return repo


@pytest.fixture
def adopted(tmp_path, capsys) -> Path:
    repo = sample_copy(tmp_path)
    wheel = fake_release(tmp_path)
    code, out, err = bot(
        capsys, "init", "--root", str(repo), "--stagebot-wheel", str(wheel), "--write"
    )
    assert code == 0, out + err
    assert "git push origin main:stagebot-stage" in out
    return repo
