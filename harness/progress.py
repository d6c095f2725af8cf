"""Progress of a run: a live status line on a terminal, plain ``[stagebot]`` lines in CI."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from stagebot.harness.causes import cause_line
from stagebot.harness.results import StageResult
from stagebot.harness.streams import LiveCounts

PREFIX = "[stagebot]"


class Progress:
    def __init__(self, stream: TextIO | None = None, live: bool | None = None):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.running: dict[str, tuple[float, LiveCounts]] = {}
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            if self.live:
                self.stream.write("\r\033[K")
            self.stream.write(f"{PREFIX} {text}\n")
            self.stream.flush()

    def started(self, stage: str, slots: tuple[str, ...], stream_path: Path) -> None:
        self.running[stage] = (time.monotonic(), LiveCounts(stream_path))
        self.line(f"start  {stage} on {', '.join(slots) or 'this host'}")

    def finished(self, result: StageResult) -> None:
        self.running.pop(result.stage, None)
        counts = _counts(result)
        failed = result.evidence and result.state != "SUCCESS"
        why = f" — {cause_line(result.evidence)}" if failed else ""
        self.line(f"{result.state:<8} {result.stage} {result.duration_s:.1f}s {counts}{why}")

    def tick(self) -> None:
        """Redraw the live line (stage, elapsed, pass/fail so far); no-op for plain output."""
        if not self.live or not self.running:
            return
        parts = []
        for stage, (start, live_counts) in list(self.running.items()):
            counts = live_counts.counts()
            passed = counts.get("passed", 0)
            failed = counts.get("failed", 0) + counts.get("error", 0)
            parts.append(f"{stage} {time.monotonic() - start:.0f}s {passed}✓ {failed}✗")
        with self.lock:
            self.stream.write("\r\033[K" + " | ".join(parts)[:200])
            self.stream.flush()


def _counts(result: StageResult) -> str:
    counts: dict[str, int] = {}
    for test in result.tests:
        counts[test.outcome] = counts.get(test.outcome, 0) + 1
    if not counts:
        return ""
    return "(" + ", ".join(f"{n} {outcome}" for outcome, n in counts.items()) + ")"
