"""Every test gets its own cache folder: the catalog remembers fragments that passed its checks
there (stages/catalog.py), and a test must see every check run, not a verdict from earlier. And
its own state folder: `bot run` writes its shards' outputs there by default (outside the
repository under test), never into the home folder of whoever runs the suite.

This suite runs in a random order (pytest-randomly); the pytest runs the tests start (a stage's
shards over tests/fixtures/suites, whose check_killed.py is about the order of its tests) keep
the file order: the shuffle is for this suite's own tests, not for the pipelines it runs.

With `-n N --dist loadfile` the files marked `slow` are handed out first (the hooks of
tests/helpers/file_order.py, which says why)."""

from __future__ import annotations

import os

import pytest
from helpers.file_order import (  # noqa: F401 - its hooks are this suite's
    pytest_collection_modifyitems,
    pytest_xdist_make_scheduler,
)


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(autouse=True, scope="session")
def _child_pytests_in_file_order_without_hypothesis_plugin():
    """The pytests the tests start (hundreds: every shard of every pipeline) go without
    hypothesis's pytest plugin, a plugin of this suite's environment: at every pytest's end it
    imports all of hypothesis (1 s of CPU here, 6.155), whether a test used it or not. A @given
    test runs and reports its failing example without it (the failure corpus has one)."""
    with pytest.MonkeyPatch.context() as patch:
        options = os.environ.get("PYTEST_ADDOPTS", "")
        patch.setenv("PYTEST_ADDOPTS", f"{options} -p no:randomly -p no:hypothesispytest".strip())
        yield


@pytest.fixture(autouse=True, scope="session")
def _pip_without_byte_compiling():
    """The pip installs the tests make (fresh virtual environments, torch and transformers among
    them) skip byte-compiling every installed module: what a test imports is compiled when it is
    imported. pip reads its "no-" variables inverted: PIP_NO_COMPILE=0 is --no-compile."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PIP_NO_COMPILE", "0")
        yield


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's pytester, whose runs keep the file order too (it clears PYTEST_ADDOPTS)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:randomly")
    return pytester
