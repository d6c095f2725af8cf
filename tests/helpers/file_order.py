"""The order in which `-n N --dist loadfile` hands out the test files: the files marked `slow`
first, then the rest, each group most tests first (xdist's own rule).

xdist's rule alone (most tests first) hands out last the long files with few tests (the failure
corpus, the install flow, the CuTe warm-up): one worker then runs them while the other has
nothing left to do. Started first, they run beside the many short files, which fill in around
them and end together. A file counts as slow if any of its tests carries the mark.

A pytest plugin: tests/conftest.py takes its two hooks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

import pytest


class Item(Protocol):
    nodeid: str

    def get_closest_marker(self, name: str) -> object | None: ...


T = TypeVar("T", bound=Item)


def file_of(nodeid: str) -> str:
    """The file of a test id (xdist's loadfile unit)."""
    return nodeid.split("::", 1)[0]


def slow_files_first(items: Sequence[T]) -> list[T]:
    """``items`` with each file's tests together, slow files first; within a file and among
    files of the same rank, the order given (a random one under pytest-randomly) is kept."""
    files: dict[str, list[T]] = {}
    for item in items:
        files.setdefault(file_of(item.nodeid), []).append(item)

    def rank(tests: list[T]) -> tuple[bool, int]:
        return (not any(t.get_closest_marker("slow") for t in tests), -len(tests))

    return [item for tests in sorted(files.values(), key=rank) for item in tests]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, after pytest-randomly's shuffle (a wrapper that runs first): every
    worker collects the same order, the one the scheduler below hands the files out in. Other
    runs keep their order (the shards' pytests over tests/fixtures/suites load this too)."""
    if hasattr(config, "workerinput"):
        items[:] = slow_files_first(items)


# pytest-xdist's hook (the quick start has no xdist), called before xdist's own makes the scheduler
@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> None:
    """`--dist loadfile` in the collected order, not re-sorted by xdist (most tests first)."""
    if config.getvalue("dist") == "loadfile":
        config.option.loadscopereorder = False  # xdist's --no-loadscope-reorder
