"""Which catalog a local command uses without --catalog: the nearest .github/stagebot-init.yml
at or above the current folder says it (as pytest and ruff find their configuration)."""

from __future__ import annotations

import pytest

from stagebot.bot.adopt.workflows import InitError, discover_catalog, find_home

PINNED = "stagebot: {version: 0.1.0, sha256: " + "a" * 64 + "}\n"


def _settings(folder, text: str):
    (folder / ".github").mkdir(parents=True)
    (folder / ".github/stagebot-init.yml").write_text(text)


def test_the_nearest_settings_name_the_catalog_relative_to_their_folder(tmp_path) -> None:
    _settings(tmp_path, "catalog: ci/catalog\n" + PINNED)
    deep = tmp_path / "src" / "pkg" / "sub"
    deep.mkdir(parents=True)
    assert find_home(deep) == tmp_path.resolve()
    assert discover_catalog(deep) == tmp_path.resolve() / "ci/catalog"
    inner = tmp_path / "vendor" / "other"  # a nested adopted repository wins for its own folders
    _settings(inner, "catalog: own\n" + PINNED)
    assert discover_catalog(inner / ".github") == inner.resolve() / "own"


def test_only_stagebots_own_repository_gets_the_shipped_catalog(tmp_path) -> None:
    _settings(tmp_path / "stagebot", "stagebot: checkout\n")
    assert discover_catalog(tmp_path / "stagebot") is None  # load_catalog(None): the shipped one
    _settings(tmp_path / "adopter", PINNED)
    with pytest.raises(
        InitError, match="names no catalog: add `catalog: .github/stagebot/catalog`"
    ):
        discover_catalog(tmp_path / "adopter")
    with pytest.raises(InitError, match="run `bot init` in your repository's root first"):
        discover_catalog(tmp_path)
