"""Run one child process in its own process group, with a deadline and a cancel switch.

The child's stdout and stderr go, line by line, to a log file (and to ``echo`` when given). On
the deadline or on cancel the whole group gets SIGTERM, then SIGKILL after a grace period, so a
pytest and every worker it spawned go away together; after a normal exit, whatever is left in the
group gets SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from stagebot.harness.decoding import text_of

KILL_GRACE_S = 5.0
POLL_S = 0.1


def load_average() -> str:
    """The host's 1-minute load average and CPU count, for the evidence of a limit that ran out:
    on a busy machine a limit ends what a quiet one finishes."""
    return f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"


@dataclass(frozen=True)
class Finished:
    returncode: int | None  # negative: killed by that signal
    timed_out: bool
    cancelled: bool
    elapsed_s: float

    @property
    def signal_name(self) -> str | None:
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


def run_process(
    argv: list[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    log_path: Path,
    deadline: float,
    cancel: threading.Event | None = None,
    echo: Callable[[str], None] | None = None,
    grace_s: float = KILL_GRACE_S,
) -> Finished:
    """Run ``argv`` until it exits, ``deadline`` (a ``time.monotonic()`` value) or ``cancel``."""
    start = time.monotonic()
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(argv)}\n".encode("utf-8", "surrogateescape"))
        log.flush()
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        pump = threading.Thread(target=_pump, args=(proc, log, echo), daemon=True)
        pump.start()
        timed_out = cancelled = False
        while proc.poll() is None:
            if cancel is not None and cancel.is_set():
                cancelled = True
            elif time.monotonic() >= deadline:
                timed_out = True
            if timed_out or cancelled:
                _kill_group(proc, grace_s)
                break
            time.sleep(POLL_S)
        proc.wait()
        _kill_leftovers(proc)
        pump.join(timeout=grace_s)
    return Finished(proc.returncode, timed_out, cancelled, time.monotonic() - start)


def _pump(proc: subprocess.Popen, log, echo) -> None:
    for line in iter(proc.stdout.readline, b""):
        log.write(line)
        log.flush()
        if echo is not None:
            echo(text_of(line).rstrip("\n"))


def _kill_leftovers(proc: subprocess.Popen) -> None:
    """The child has exited: whatever it left running in its group (workers, a background
    process holding the log pipe) goes too."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is empty (PermissionError: macOS, for a group of zombies)


def _kill_group(proc: subprocess.Popen, grace_s: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            # The leader is gone; make sure no worker of the group outlives it.
            os.killpg(proc.pid, signal.SIGKILL)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return
