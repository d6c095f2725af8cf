"""Progress of a run: a live status line on a terminal, plain ``[stagebot]`` lines in CI (there,
one every ``PLAIN_EVERY_S`` while shards run, so a long shard is never silent)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from stagebot.harness.analysis.causes import cause_line
from stagebot.harness.results import StageResult
from stagebot.harness.run.streams import LiveCounts

PREFIX = "[stagebot]"
PLAIN_EVERY_S = 30.0


@dataclass(frozen=True)
class Expected:
    """What the ledger's complete runs say a shard will take: its test count and its time (each
    None: never recorded)."""

    tests: int | None
    seconds: float | None


class Progress:
    """Prints the start and end of each shard and, on a terminal, a live line, elsewhere a line
    every ``every_s``; they show the tests done of the total, the time elapsed and the time
    left, estimated from the ledger's durations. ``clock``: seconds, monotonic."""

    def __init__(
        self,
        stream: TextIO | None = None,
        live: bool | None = None,
        *,
        every_s: float = PLAIN_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.running: dict[str, tuple[float, LiveCounts]] = {}
        self.lock = threading.Lock()
        self.expected: dict[str, Expected] = {}
        self.done: dict[str, int] = {}  # stage -> tests it ran (finished shards)
        self.parallel = 1
        self.every_s, self.clock = every_s, clock
        self.start = self.last_line = clock()

    def plan(self, expected: dict[str, Expected], parallel: int) -> None:
        """The shards that will run (stage -> Expected) on ``parallel`` slots at most."""
        self.expected, self.parallel = dict(expected), max(parallel, 1)
        self.start = self.last_line = self.clock()

    def overall(self) -> str:
        """``1/3 shards, 12/40 tests, 2m10s elapsed, ~3m00s left``: tests done of the total, the
        time since the shards started and the time left (the recorded seconds of the shards not
        finished, less what the running ones have spent, spread over the slots): "no history
        yet" when the ledger has none, never "~0s" while a shard runs past its estimate. Empty
        before ``plan`` is told of any shard."""
        if not self.expected:
            return ""
        now = self.clock()
        done = total = 0
        left_s, unknown, no_history, overdue = 0.0, False, 0, False
        for stage, expected in self.expected.items():
            if stage in self.done:  # finished: its real count
                done += self.done[stage]
                total += self.done[stage]
                continue
            if expected.tests is None:
                unknown = True
            else:
                total += expected.tests
            spent = 0.0
            if stage in self.running:
                start, live = self.running[stage]
                done += sum(live.counts().values())
                spent = now - start
            if expected.seconds is None:
                no_history += 1
            else:
                left_s += max(expected.seconds - spent, 0.0)
                overdue = overdue or spent > expected.seconds
        pending = len(self.expected) - len(self.done)
        eta = left_s / max(min(self.parallel, pending), 1)
        shards = f"{len(self.done)}/{len(self.expected)} shards"
        # a shard with no recorded count: "10+" while the known ones exceed what is done, else "?"
        total_text = str(max(total, done)) if not unknown else f"{total}+" if total > done else "?"
        left = _left(eta, pending, no_history, overdue)
        return f"{shards}, {done}/{total_text} tests, {_eta(now - self.start)} elapsed{left}"

    def line(self, text: str) -> None:
        self.last_line = self.clock()
        with self.lock:
            if self.live:
                self.stream.write("\r\033[K")
            self.stream.write(f"{PREFIX} {text}\n")
            self.stream.flush()

    def started(self, stage: str, slots: tuple[str, ...], stream_path: Path) -> None:
        self.running[stage] = (self.clock(), LiveCounts(stream_path))
        self.line(f"start  {stage} on {', '.join(slots) or 'this host'}")

    def finished(self, result: StageResult) -> None:
        self.running.pop(result.stage, None)
        if result.stage in self.expected:
            self.done[result.stage] = len(result.tests)
        counts = _counts(result)
        failed = result.evidence and result.state != "SUCCESS"
        why = f" — {cause_line(result.evidence)}" if failed else ""
        overall = self.overall()
        self.line(
            f"{result.state:<8} {result.stage} {result.duration_s:.1f}s {counts}{why}"
            + (f" [{overall}]" if overall else "")
        )

    def tick(self) -> None:
        """Redraw the live line (stage, elapsed, pass/fail so far); for plain output, print it
        as a line once every ``every_s``."""
        if not self.running:
            return
        parts = []
        for stage, (start, live_counts) in list(self.running.items()):
            counts = live_counts.counts()
            passed = counts.get("passed", 0)
            failed = counts.get("failed", 0) + counts.get("error", 0)
            parts.append(f"{stage} {self.clock() - start:.0f}s {passed}✓ {failed}✗")
        overall = self.overall()
        if not self.live:
            if self.clock() - self.last_line >= self.every_s:
                self.line("running " + " | ".join(parts) + (f" [{overall}]" if overall else ""))
            return
        line = (f"[{overall}] " if overall else "") + " | ".join(parts)
        with self.lock:
            self.stream.write("\r\033[K" + line[:200])
            self.stream.flush()


def _left(eta_s: float, pending: int, no_history: int, overdue: bool) -> str:
    """The time-left part of ``Progress.overall``."""
    if not pending:
        return ""
    if no_history == pending:
        return ", no history yet"
    if round(eta_s) == 0 and overdue:
        return ", past the ledger's estimate"
    rest = f" + {no_history} shard(s) with no history" if no_history else ""
    return f", ~{_eta(eta_s)} left{rest}"


def _eta(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _counts(result: StageResult) -> str:
    counts: dict[str, int] = {}
    for test in result.tests:
        counts[test.outcome] = counts.get(test.outcome, 0) + 1
    if not counts:
        return ""
    return "(" + ", ".join(f"{n} {outcome}" for outcome, n in counts.items()) + ")"
