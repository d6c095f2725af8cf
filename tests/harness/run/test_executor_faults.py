"""Faults: hangs, crashes, signals, damaged JUnit/JSONL, an unusable ledger.

Every case asserts the final states: the pipeline ends (never RUNNING), the affected shard is ERROR
with its evidence (INFRA for the machine's faults), the other shards' results are kept, and the exit
status is non-zero.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fixtures.botrun import ROOT, bot, results, run_stages

from stagebot.harness.ledger.book import Ledger
from stagebot.harness.ledger.store import LedgerError
from stagebot.harness.run.junit import JunitError, read_junit
from stagebot.harness.run.streams import read_stream

pytestmark = pytest.mark.slow

FAULTY = {
    "CPU-PyTorch-Hang-1": "timeout: killed after 60 s, load average ",  # then where it hung
    "CPU-PyTorch-Crash-1": "crashed: pytest killed by SIGKILL before writing any result",
    "CPU-PyTorch-Killed-1": "crashed: pytest killed by SIGKILL while running "
    "tests/fixtures/suites/check_killed.py::test_kills_the_worker",
    "CPU-PyTorch-Corrupt_Jsonl-1": "corrupt output: tests.jsonl is corrupt (line",
    "CPU-PyTorch-Corrupt_Junit-1": "corrupt output: junit-1-1.xml is corrupt or truncated",
}


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    stages = ", ".join([*FAULTY, "CPU-Build_Check", "CPU-PyTorch-Waived-1"])
    done = run_stages(
        tmp / "ledger.sqlite",
        tmp / "out",
        stages,
        "--disable-fail-fast",
        # No --shard-timeout: the catalog gives the hang its own minute (time enough for its
        # pytest to start on a loaded machine), the other shards keep their 5 minutes.
        extra=["--cpu-slots", "3"],
    )
    return tmp, done


def test_faulty_shards_end_in_error_with_their_evidence(faulty_run) -> None:
    """SIGKILL (the runner or the host killed pytest) and the shard's own timeout, each once (re-run
    alone, the test passes), and unreadable results are the machine's: INFRA (docs/running.md's
    exit table), so the run exits 3. (A test's own hang, under pytest-timeout or again when
    re-run alone, is the code's: see the failure corpus and test_rerun_alone.py.)"""
    tmp, done = faulty_run
    assert done.returncode == 3, done.stdout + done.stderr
    out = results(tmp / "out")
    for stage, evidence in FAULTY.items():
        assert out[stage]["state"] == "ERROR", (stage, out[stage])
        assert out[stage]["evidence"].startswith(evidence), (stage, out[stage]["evidence"])
    report = (tmp / "out" / "report.md").read_text()
    assert "INFRA</b> (5)" in report and "UNCLASSIFIED</b>" not in report
    entry = "- <code>tests/fixtures/suites/check_hang.py::test_stalls_once</code>"
    (hang,) = [line for line in report.splitlines() if line.startswith(entry)]
    assert re.search(r"time limit: 60 s ran out \(load average [\d.]+ on \d+ CPUs\)", hang)
    # re-run alone with a longer limit, it passed: the stall was the machine's
    stalled = {t["test_id"]: t for t in out["CPU-PyTorch-Hang-1"]["tests"]}
    assert stalled["tests/fixtures/suites/check_hang.py::test_stalls_once"]["evidence"].endswith(
        "; it passed when re-run alone"
    )


def test_other_shards_and_earlier_tests_are_kept(faulty_run) -> None:
    tmp, _ = faulty_run
    out = results(tmp / "out")
    assert out["CPU-Build_Check"]["state"] == "SUCCESS"
    assert out["CPU-PyTorch-Waived-1"]["state"] == "SUCCESS"
    outcomes = {t["test_id"].split("::")[1]: t for t in out["CPU-PyTorch-Killed-1"]["tests"]}
    assert outcomes["test_before_the_kill"]["outcome"] == "passed"  # streamed before the crash
    assert outcomes["test_kills_the_worker"]["outcome"] == "error"
    after = outcomes["test_after_the_kill"]  # never started: listed, not lost
    assert after["outcome"] == "error"
    assert after["evidence"] == (
        "never ran: pytest ended during tests/fixtures/suites/check_killed.py::"
        "test_kills_the_worker before this test started"
    )
    report = (tmp / "out" / "report.md").read_text()
    assert "never ran: 1 collected test(s) never started" in report
    assert report.count("check_killed.py::test_after_the_kill") == 1  # with its culprit
    hang = {t["test_id"].split("::")[1]: t for t in out["CPU-PyTorch-Hang-1"]["tests"]}
    assert hang["test_quick"]["outcome"] == "passed"
    assert hang["test_stalls_once"]["evidence"].startswith("timeout: still running")
    junit = {t["test_id"].split("::")[1] for t in out["CPU-PyTorch-Corrupt_Junit-1"]["tests"]}
    assert junit == {"test_passes", "test_also_passes"}  # the stream still had them


def test_the_pipeline_is_final_in_the_ledger(faulty_run) -> None:
    tmp, _ = faulty_run
    with sqlite3.connect(tmp / "ledger.sqlite") as db:
        (state,) = db.execute("SELECT state FROM pipelines").fetchone()
        shards = dict(db.execute("SELECT stage, state FROM shards").fetchall())
    assert state == "FAILURE"
    assert len(shards) == len(FAULTY) + 2 and "RUNNING" not in shards.values()


def test_the_hung_pytest_and_its_workers_are_gone(tmp_path) -> None:
    # A hung shard's process group is killed: nothing of it is left sleeping. Its pytest is
    # known by its command line, which names this test's folder (another test may be running
    # the same suite at the same time, on another worker).
    run_stages(
        tmp_path / "l.sqlite",
        tmp_path / "out",
        "CPU-PyTorch-Hang-1",
        extra=["--shard-timeout", "2"],
    )
    pattern = f"check_hang.py.*{re.escape(str(tmp_path))}"
    leftovers = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    assert leftovers.stdout.split() == []


def test_truncated_stream_keeps_whole_lines(tmp_path) -> None:
    stream = tmp_path / "tests.jsonl"
    stream.write_text(
        '{"event": "start", "test_id": "a"}\n'
        '{"event": "result", "test_id": "a", "outcome": "passed"}\n'
        '{"event": "start", "test_id": "b"}\n'
        '{"event": "resu'
    )
    read = read_stream(stream)
    assert list(read.results) == ["a"] and read.unfinished == ["b"]
    assert read.problem == "tests.jsonl is truncated (line 4 is cut short)"
    assert not read_stream(tmp_path / "absent.jsonl").exists


def test_corrupt_and_hostile_junit_is_refused(tmp_path) -> None:
    cut = tmp_path / "cut.xml"
    cut.write_text('<?xml version="1.0"?><testsuites><testsuite><testcase name="x"')
    with pytest.raises(JunitError, match="cut.xml is corrupt or truncated"):
        read_junit(cut)
    bomb = tmp_path / "bomb.xml"
    bomb.write_text(
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]>'
        '<testsuite><testcase name="&b;"/></testsuite>'
    )
    with pytest.raises(JunitError):  # defusedxml refuses entity declarations
        read_junit(bomb)
    assert read_junit(tmp_path / "none.xml") is None


# -- the ledger: locked, corrupt, unwritable -> exit 3, nothing runs, the file is untouched ---


def _digest(path: Path) -> tuple[str, float]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime


def _valid_ledger(path: Path) -> Path:
    book = Ledger.open(path)
    book.start_pipeline(command={"version": 1, "command": "run", "options": {}}, commit="x")
    book.close()
    return path


def _refused(tmp_path: Path, ledger: Path, message: str, env=None) -> None:
    out = tmp_path / "out"
    done = run_stages(ledger, out, "CPU-Build_Check", env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"Error: ledger {ledger}" in done.stderr and message in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()  # stopped before running anything


def test_locked_ledger_exits_3_untouched(tmp_path) -> None:
    ledger = _valid_ledger(tmp_path / "ledger.sqlite")
    before = _digest(ledger)
    holder = sqlite3.connect(ledger, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        _refused(
            tmp_path,
            ledger,
            "still locked by another process after the 0.5 s busy timeout",
            env={"STAGEBOT_LEDGER_BUSY_TIMEOUT": "0.5"},
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert _digest(ledger) == before


def test_corrupt_ledger_exits_3_untouched(tmp_path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    ledger.write_bytes(b"this is not a database, just text that someone saved here\n" * 20)
    before = _digest(ledger)
    _refused(tmp_path, ledger, "is corrupt: not an SQLite database")
    assert _digest(ledger) == before
    assert not Path(f"{ledger}-wal").exists()


def test_damaged_pages_exit_3_untouched(tmp_path) -> None:
    ledger = _valid_ledger(tmp_path / "ledger.sqlite")
    data = bytearray(ledger.read_bytes())
    data[100:4096] = os.urandom(3996)  # keep the header, wreck the schema page
    ledger.write_bytes(bytes(data))
    before = _digest(ledger)
    _refused(tmp_path, ledger, "corrupt")
    assert _digest(ledger) == before


@pytest.mark.parametrize("kind", ["a folder", "read-only folder"])
def test_unwritable_ledger_exits_3(tmp_path, kind: str) -> None:
    if kind == "a folder":
        ledger = tmp_path / "ledger.sqlite"
        ledger.mkdir()
        message = "is a folder"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes through read-only permissions; the other two kinds cover it")
        folder = tmp_path / "ro"
        folder.mkdir(mode=0o500)
        ledger = folder / "ledger.sqlite"
        message = "does not allow writing"
    _refused(tmp_path, ledger, message)


def test_busy_ledger_waits_then_proceeds(tmp_path) -> None:
    """Negative control for the lock test: a lock released within the timeout is waited for."""
    ledger = _valid_ledger(tmp_path / "ledger.sqlite")
    code = (
        "import sqlite3, time, sys\n"
        f"db = sqlite3.connect({str(ledger)!r}, isolation_level=None)\n"
        "db.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(1.5)\n"
        "db.execute('ROLLBACK')\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    book = Ledger.open(ledger, busy_timeout=30)
    number = book.start_pipeline(command={"version": 1}, commit="y")
    holder.wait()
    assert number == 2  # it waited for the lock instead of failing


def test_read_only_open_of_a_missing_ledger_is_refused(tmp_path) -> None:
    with pytest.raises(LedgerError, match="does not exist"):
        Ledger.open(tmp_path / "absent.sqlite", readonly=True)
    assert not (tmp_path / "absent.sqlite").exists()


def test_report_of_a_ledger_pipeline_that_does_not_exist(tmp_path) -> None:
    ledger = _valid_ledger(tmp_path / "ledger.sqlite")
    done = bot("report", "--ledger", str(ledger), "--pipeline", "42")
    assert done.returncode == 2 and "has no pipeline #42" in done.stderr
    latest = json.loads(bot("report", "--ledger", str(ledger), "--format", "json").stdout)
    assert latest["pipeline"] == 1


HANG_S = 600  # only stops a hung test: every wait here ends on an event long before


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + HANG_S
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _hold_while_recording(ledger: Path, shard: Path, busy_timeouts: float) -> threading.Thread:
    """Another process's transaction: hold the ledger's write lock from the moment the shard has
    started (its log exists) until it has finished (its result.json exists), then for
    ``busy_timeouts`` more seconds, so the executor's write of that result meets the lock."""

    def hold() -> None:
        _wait_for(shard / "log.txt")
        holder = sqlite3.connect(ledger, isolation_level=None, timeout=HANG_S)
        holder.execute("BEGIN EXCLUSIVE")
        _wait_for(shard / "result.json")
        time.sleep(busy_timeouts)
        holder.execute("ROLLBACK")
        holder.close()

    thread = threading.Thread(target=hold)
    thread.start()
    return thread


def test_a_ledger_locked_mid_run_is_waited_for(tmp_path) -> None:
    ledger, out = tmp_path / "ledger.sqlite", tmp_path / "out"
    holder = _hold_while_recording(ledger, out / "CPU-PyTorch-Waived-1", busy_timeouts=3)
    done = run_stages(
        ledger, out, "CPU-PyTorch-Waived-1", env={"STAGEBOT_LEDGER_BUSY_TIMEOUT": "1"}
    )
    holder.join()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "completed with state SUCCESS" in done.stdout and (out / "report.md").exists()
    with sqlite3.connect(ledger) as db:
        assert db.execute("SELECT state FROM pipelines").fetchall() == [("SUCCESS",)]


def test_an_error_after_the_start_ends_the_pipeline_aborted(tmp_path, monkeypatch) -> None:
    from click.testing import CliRunner

    from stagebot.bot.cli.local.run import run
    from stagebot.harness.pipeline import local

    def broken(*args, **kwargs):
        raise LedgerError("ledger x is still locked by another process")

    monkeypatch.setattr(local, "execute", broken)  # the executor, as the local run calls it
    ledger = tmp_path / "ledger.sqlite"
    args = ["--catalog", str(ROOT / "tests/fixtures/catalog"), "--ledger", str(ledger)]
    args += ["--commit", "c0ffee", "--out", str(tmp_path / "out")]
    done = CliRunner().invoke(run, [*args, '/bot run --stage-list "CPU-PyTorch-Waived-1"'])
    assert isinstance(done.exception, LedgerError)  # the CLI prints it and exits 3
    with sqlite3.connect(ledger) as db:
        ((state, meta),) = db.execute("SELECT state, meta FROM pipelines").fetchall()
    assert state == "ABORTED" and "still locked" in json.loads(meta)["error"]


@pytest.mark.parametrize(
    "tables",
    [
        "CREATE TABLE pipelines (x INTEGER); CREATE TABLE other (y TEXT)",  # a clashing table
        "CREATE TABLE notes (body TEXT)",  # nothing in common: must not gain our tables
    ],
    ids=["clashing", "foreign"],
)
def test_another_sqlite_database_exits_3_untouched(tmp_path, tables: str) -> None:
    ledger = tmp_path / "app.db"
    with sqlite3.connect(ledger) as db:
        db.executescript(tables + "; INSERT INTO " + tables.split()[2] + " VALUES (1);")
    before = _digest(ledger)
    _refused(tmp_path, ledger, "is an SQLite database but not a stagebot ledger")
    assert _digest(ledger) == before  # byte 18/19 (the WAL switch) included
    assert not Path(f"{ledger}-wal").exists()
    with pytest.raises(LedgerError, match="not a stagebot ledger"):
        Ledger.open(ledger, readonly=True)
    assert _digest(ledger) == before
