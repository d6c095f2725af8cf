"""Reuse by dependency key in `bot run` (real pytest subprocesses, a real ledger): a test whose
key matches a trusted passed run is deselected from its shard's pytest, and re-runs when an
input changes, the runner's environment differs, reuse is off or the run is not trusted."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from pathlib import Path

from helpers.cli import bot_process
from helpers.distributions import install_distribution
from helpers.key_reuse import CATALOG, executed, reused, run

from stagebot.harness.reuse.offers import KEYS_FILE

TEST = """import os

import lib


def test_value():
    assert lib.VALUE == 1


def test_env():
    assert not os.environ.get("KEY_REUSE_BROKEN")
"""


def repo(tmp: Path) -> Path:
    root = tmp / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_a.py").write_text(TEST)
    (root / "lib.py").write_text("VALUE = 1\n")
    (root / "docs").mkdir()
    (root / "docs" / "guide.md").write_text("docs\n")
    (root / "conftest.py").write_text(
        "import sys, os\nsys.path.insert(0, os.path.dirname(__file__))\n"
    )
    (tmp / "catalog.yaml").write_text(CATALOG.format(suite="tests/test_a.py"))
    return root


def test_an_unchanged_test_is_deselected_on_a_new_commit_and_reruns_when_its_input_changes(
    tmp_path,
) -> None:
    root = repo(tmp_path)
    first, out1 = run(tmp_path, "c1")
    assert first.returncode == 0, first.stdout + first.stderr
    assert executed(out1) == ["test_env", "test_value"]

    (root / "docs" / "guide.md").write_text("other docs\n")  # no test reads it
    second, out2 = run(tmp_path, "c2")
    assert second.returncode == 0, second.stdout + second.stderr
    assert executed(out2) == []  # deselected from pytest, not a pass made up
    shard = out2 / "CPU-PyTorch-1"
    assert "2 deselected" in (shard / "log.txt").read_text()
    assert (shard / "raw" / "deselect.txt").read_text().split() == [
        "tests/test_a.py::test_env",
        "tests/test_a.py::test_value",
    ]
    assert reused(tmp_path, 2) == {"test_env": (1, "key"), "test_value": (1, "key")}
    assert "| CPU-PyTorch-1 | SUCCESS |" in second.stdout and "2 reused" in second.stdout
    assert "Reuse: 2 tests reused by key (from #1 of this branch)." in second.stdout

    (root / "lib.py").write_text("VALUE = 2\n")  # an imported module: both re-run
    third, out3 = run(tmp_path, "c3")
    assert third.returncode == 1, third.stdout + third.stderr
    assert executed(out3) == ["test_env", "test_value"]
    assert reused(tmp_path, 3) == {}


def test_a_different_environment_on_the_runner_drops_the_reuse(tmp_path) -> None:
    repo(tmp_path)
    assert run(tmp_path, "c1")[0].returncode == 0
    done, out = run(tmp_path, "c2", env={"KEY_REUSE_BROKEN": "1"})  # a variable test_a reads
    assert done.returncode == 1, done.stdout + done.stderr
    assert executed(out) == ["test_env", "test_value"]
    log = (out / "CPU-PyTorch-1" / "log.txt").read_text()
    assert "2 test(s) with unchanged code not reused: their environment differ(s)" in log


def test_disable_reuse_test_runs_everything_and_still_records_keys(tmp_path) -> None:
    repo(tmp_path)
    assert run(tmp_path, "c1")[0].returncode == 0
    done, out = run(tmp_path, "c2", comment="/bot run --disable-reuse-test")
    assert done.returncode == 0, done.stdout + done.stderr
    assert executed(out) == ["test_env", "test_value"]
    keys = json.loads((out / "CPU-PyTorch-1" / KEYS_FILE).read_text())
    assert keys["reused"] == {} and len(keys["keys"]) == 2


def test_another_prs_run_is_not_reused_the_same_prs_and_mains_are(tmp_path) -> None:
    repo(tmp_path)
    assert run(tmp_path, "c1", "--pr", "4")[0].returncode == 0
    _, theirs = run(tmp_path, "c2", "--pr", "5")
    assert executed(theirs) == ["test_env", "test_value"]  # PR 4's passes are not PR 5's
    done, mine = run(tmp_path, "c3", "--pr", "4")
    assert "Reuse: 2 tests reused by key (from #1 of this PR)." in done.stdout
    assert executed(mine) == [] and reused(tmp_path, 3) == {
        "test_env": (1, "key"),
        "test_value": (1, "key"),
    }
    assert run(tmp_path, "c4", "--branch", "main")[0].returncode == 0  # main runs: not trusted yet
    done, other = run(tmp_path, "c5", "--pr", "6")
    assert executed(other) == [] and set(reused(tmp_path, 5).values()) == {(4, "key")}
    assert "Reuse: 2 tests reused by key (from #4 on main)." in done.stdout
    done, _ = run(tmp_path, "c6", "--pr", "4")  # main's #4 is newer than PR 4's own #1
    assert "Reuse: 2 tests reused by key (from #4 on main)." in done.stdout


def test_keys_are_recorded_only_for_tests_that_reached_an_outcome(tmp_path) -> None:
    from fixtures.botrun import CATALOG as FIXTURES
    from fixtures.botrun import run_stages

    ledger, out = tmp_path / "ledger.sqlite", tmp_path / "out"
    run_stages(ledger, out, "CPU-PyTorch-Killed-1")
    with sqlite3.connect(ledger) as db:
        outcomes = {t for (t,) in db.execute("SELECT test_id FROM tests")}
        keys = {t for (t,) in db.execute("SELECT test_id FROM test_keys")}
    assert FIXTURES.exists() and keys == outcomes and outcomes


def explain(tmp: Path, test_id: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`bot stages --explain-reuse` in the repository (its root is where the keys are read)."""
    return bot_process(
        "stages", "--catalog", str(tmp / "catalog.yaml"), "--ledger", str(tmp / "ledger.sqlite"),
        "--explain-reuse", test_id, cwd=tmp / "repo", env=env,
    )  # fmt: skip


def _digests(explained: str, part: str) -> tuple[str, str]:
    """The recorded and the current digest of ``part`` that `--explain-reuse` printed."""
    return re.search(rf"  {part} then: (\S+)   now: (\S+)", explained).groups()


def test_explain_reuse_says_whether_and_which_input_changed(tmp_path) -> None:
    root = repo(tmp_path)
    assert run(tmp_path, "c1")[0].returncode == 0
    test_id = "tests/test_a.py::test_value"
    same = explain(tmp_path, test_id)
    assert same.returncode == 0, same.stderr
    assert "  would be reused by key: yes, from #1 (by branch (none) only" in same.stdout
    assert "  changed: nothing" in same.stdout
    then, now = _digests(same.stdout, "environment")
    assert then == now

    site = install_distribution(tmp_path / "site", "environment-probe")  # one more
    moved = explain(tmp_path, test_id, env={"PYTHONPATH": str(site)}).stdout
    assert "  would be reused by key: no (an input changed)" in moved
    assert "  changed: environment (on this machine; a runner compares its own)" in moved
    then, now = _digests(moved, "environment")
    assert then != now, "what it prints must agree with what it decides"

    (root / "lib.py").write_text("VALUE = 1  # edited\n")
    changed = explain(tmp_path, test_id)
    assert "  would be reused by key: no (an input changed)" in changed.stdout
    assert "  changed: files changed: lib.py" in changed.stdout.splitlines()

    (root / "data.json").write_text("{}")  # beside conftest.py, which locates itself
    added = explain(tmp_path, test_id).stdout.splitlines()
    assert "  changed: files added: data.json" in added

    unknown = explain(tmp_path, "tests/test_a.py::test_missing")
    assert unknown.returncode == 2 and "has no dependency key for" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_offers_too_long_for_a_dispatch_are_dropped_not_the_dispatch() -> None:
    """A matrix travels in a workflow_dispatch's inputs (60,000 characters): when the offers
    would not fit, the entries go without them (the tests run), keeping their key inputs."""
    from helpers.contracts import example

    from stagebot.bot.protocols.dispatch_inputs import fitting
    from stagebot.stages.plan import MatrixEntry

    data = example("matrix_entry")
    many = {f"tests/test_x.py::test_{i}": ["5be0c2d1e8f4a7b6", 0] for i in range(400)}
    entry = MatrixEntry.from_json({**data, "key_reuse": {**data["key_reuse"], "candidates": many}})
    assert fitting([entry]) == [entry]  # 400 tests fit
    dropped = fitting([entry] * 3, limit=len(json.dumps(entry.to_json())) * 2)
    assert len(dropped) == 3 and all(e.key_reuse["candidates"] == {} for e in dropped)
    assert all(e.key_reuse["sources"] == [] for e in dropped)
    assert dropped[0].key_reuse["family"] == entry.key_reuse["family"]
