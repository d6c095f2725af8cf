"""The observed part of a key: the shard plug-in's audit hook records, per test file, the
repository files it read and the modules it imported, and the programs it started that may run
our code; not what it wrote, nor files outside the repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from stagebot.harness.reuse.observe import read_observations

TEST = """import importlib, os, subprocess, sys
from pathlib import Path

FOLDER = "res" + "ources"


def test_reads(tmp_path):
    assert (Path(FOLDER) / "value.txt").read_text() == "1"
    importlib.import_module("lib" + "mod")
    (Path(FOLDER) / "written.txt").write_text("out")
    (tmp_path / "outside.txt").write_text("x")
    assert (tmp_path / "outside.txt").read_text() == "x"
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    subprocess.run(["true"], check=True)
"""


def test_the_hook_records_what_each_test_file_read_and_started(tmp_path) -> None:
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "resources").mkdir()
    (root / "resources" / "value.txt").write_text("1")
    (root / "libmod.py").write_text("X = 1\n")
    (root / "tests" / "test_reads.py").write_text(TEST)
    (root / "tests" / "test_quiet.py").write_text("def test_nothing():\n    pass\n")
    folder = tmp_path / "observed"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         "-p", "stagebot.harness.run.pytest_plugin", f"--stagebot-observe={folder}",
         f"--basetemp={tmp_path / 'base'}"],
        cwd=root, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    observed = read_observations(folder, ["tests/test_reads.py", "tests/test_quiet.py"])
    reads = observed["tests/test_reads.py"]
    assert {"resources/value.txt", "libmod.py", "tests/test_reads.py"} <= set(reads.files)
    assert "resources/written.txt" not in reads.files  # written, not read
    assert all(not path.startswith("/") for path in reads.files)  # the tmp folder is outside
    assert len(reads.started) == 1 and reads.started[0].endswith("-c pass")  # not `true`
    assert "resources/value.txt" not in observed["tests/test_quiet.py"].files


def test_an_unreadable_record_is_skipped(tmp_path) -> None:
    (tmp_path / "observed-1.json").write_text("{not json")
    (tmp_path / "observed-2.json").write_text(json.dumps({"t.py": {"files": ["a"], "started": []}}))
    assert read_observations(tmp_path, ["t.py"])["t.py"].files == ("a",)
    assert read_observations(tmp_path / "missing", ["t.py"]) == {}
