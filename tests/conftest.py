"""Every test gets its own cache folder: the catalog remembers fragments that passed its checks
there (stages/catalog.py), and a test must see every check run, not a verdict from earlier."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
