"""KeyCheck.read_ahead: a shard's test files read on a thread while its tests run, so that its
keys after the run only add what the run observed; the keys are the ones computed without it."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stagebot.harness.reuse import dependency_key
from stagebot.harness.reuse.dependency_key import FamilyInputs, Repository, current_environment
from stagebot.harness.reuse.offers import KEYS_FILE, KeyCheck, _test_files

FAMILY = FamilyInputs("CPU-PyTorch", "CPU", suite_args="s1", entry="e1")


@dataclass
class Entry:
    """The two fields of a matrix entry read_ahead reads."""

    tests: list[str] = field(default_factory=list)
    suites: list[dict] = field(default_factory=list)


def checkout(tmp: Path) -> Path:
    root = tmp / "repo"
    for folder in ("tests/unit", "tests_more", "lib"):
        (root / folder).mkdir(parents=True)
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "values.py").write_text("VALUE = 1\n")
    (root / "tests" / "unit" / "test_a.py").write_text(
        "from lib.values import VALUE\n\n\ndef test_a():\n    assert VALUE == 1\n"
    )
    (root / "tests" / "unit" / "b_test.py").write_text("def test_b():\n    pass\n")
    (root / "tests" / "unit" / "helper.py").write_text("X = 1\n")
    (root / "tests_more" / "test_c.py").write_text("def test_c():\n    pass\n")
    return root


def check_of(root: Path) -> KeyCheck:
    return KeyCheck(FAMILY, current_environment(), Repository(root))


def keys_text(check: KeyCheck, out: Path, finished: list[str]) -> str:
    out.mkdir()
    check.write(out, finished)
    return (out / KEYS_FILE).read_text()


def test_the_test_files_are_the_shares_or_those_pytest_collects_under_the_suites(tmp_path):
    root = checkout(tmp_path)
    files = Repository(root).files
    share = Entry(tests=["tests/unit/test_a.py::test_a", "tests/unit/test_a.py::test_x"])
    assert _test_files(share, files) == ["tests/unit/test_a.py"]
    whole = Entry(suites=[{"path": "tests/"}])  # not tests_more, not helper.py
    assert _test_files(whole, files) == ["tests/unit/b_test.py", "tests/unit/test_a.py"]
    one_file = Entry(suites=[{"path": "tests_more/test_c.py"}, {"path": "x", "builtin": True}])
    assert _test_files(one_file, files) == ["tests_more/test_c.py"]


def test_keys_read_ahead_are_the_keys_read_after_the_run(tmp_path):
    root = checkout(tmp_path)
    finished = ["tests/unit/b_test.py::test_b", "tests/unit/test_a.py::test_a"]
    plain = keys_text(check_of(root), tmp_path / "plain", finished)
    ahead = check_of(root)
    ahead.read_ahead(Entry(suites=[{"path": "tests"}]))
    assert keys_text(ahead, tmp_path / "ahead", finished) == plain
    files = json.loads(plain)["files"]["tests/unit/test_a.py"]
    assert "lib/values.py" in files  # the import closure is in them


def test_a_key_waits_for_the_reading_ahead(tmp_path, monkeypatch):
    """A key stops the reading ahead after the file it is reading and waits for that file: no
    key is computed while the thread fills the Repository's caches, and the files not read yet
    are read as their keys ask (a shard cut short reads only its finished tests' files)."""
    root = checkout(tmp_path)
    check = check_of(root)
    events: list[str] = []
    reading = threading.Event()
    real = check.repo.inputs

    def slow(test_file, plugins=(), observed=None):
        if threading.current_thread() is not threading.main_thread():
            reading.set()
            time.sleep(0.2)
            events.append(f"read {test_file}")
        return real(test_file, plugins, observed)

    monkeypatch.setattr(check.repo, "inputs", slow)
    check.read_ahead(Entry(tests=["tests/unit/test_a.py::test_a", "tests/unit/b_test.py::t"]))
    reading.wait(timeout=30)  # the thread is in its first file
    check.key("tests/unit/test_a.py::test_a")
    events.append("key")
    assert events == ["read tests/unit/b_test.py", "key"]


def test_a_failure_on_the_thread_is_met_again_by_the_key(tmp_path, monkeypatch):
    root = checkout(tmp_path)
    check = check_of(root)

    def broken(*args, **kwargs):
        raise OSError("the checkout cannot be read")

    monkeypatch.setattr(dependency_key.TestInputs, "read", broken)
    check.read_ahead(Entry(tests=["tests/unit/test_a.py::test_a"]))
    with pytest.raises(OSError, match="the checkout cannot be read"):
        check.key("tests/unit/test_a.py::test_a")
