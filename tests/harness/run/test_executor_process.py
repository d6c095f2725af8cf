"""harness.process: a shard's child runs in its own process group, and nothing of it outlives it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from stagebot.harness.run.process import run_process


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def test_a_worker_left_behind_by_a_normal_exit_is_killed(tmp_path) -> None:
    pid_file = tmp_path / "pid"
    script = f"sleep 300 >/dev/null 2>&1 & echo $! > {pid_file}; echo done"
    finished = run_process(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=os.environ,
        log_path=tmp_path / "log.txt",
        deadline=time.monotonic() + 60,
    )
    assert finished.returncode == 0 and not finished.timed_out
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 120  # only stops a hang: the kill lands at once
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not _alive(pid), "the shard's background worker survived it"
    finally:
        if _alive(pid):
            os.kill(pid, 9)
    assert "done" in (tmp_path / "log.txt").read_text()
