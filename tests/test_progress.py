"""The live progress line: incremental outcome counts of a stream still being written."""

from __future__ import annotations

import io
import json
from pathlib import Path

from stagebot.harness.progress import Progress
from stagebot.harness.streams import LiveCounts


def _record(test_id: str, outcome: str | None = None) -> bytes:
    event = (
        {"event": "result", "test_id": test_id, "outcome": outcome}
        if outcome
        else {
            "event": "start",
            "test_id": test_id,
        }
    )
    return (json.dumps(event) + "\n").encode()


def test_counts_read_only_appended_whole_lines(tmp_path: Path):
    path = tmp_path / "tests.jsonl"
    live = LiveCounts(path)
    assert live.counts() == {}, "no file yet"
    path.write_bytes(_record("a") + _record("a", "passed") + _record("b", "failed"))
    assert live.counts() == {"passed": 1, "failed": 1}
    offset = live.offset
    half = _record("c", "passed")
    with path.open("ab") as stream:
        stream.write(half[:10])
    assert live.counts() == {"passed": 1, "failed": 1} and live.offset == offset
    with path.open("ab") as stream:
        stream.write(half[10:] + b"not json\n" + _record("b", "passed"))
    assert live.counts() == {"passed": 3}, "b's rerun replaces its failure; bad lines are skipped"
    assert live.offset == path.stat().st_size
    path.write_bytes(_record("z", "skipped"))  # a new run of the shard replaced the file
    assert live.counts() == {"skipped": 1}


def test_the_live_line_shows_each_running_shard(tmp_path: Path):
    path = tmp_path / "tests.jsonl"
    path.write_bytes(_record("a", "passed") + _record("b", "error"))
    out = io.StringIO()
    progress = Progress(out, live=True)
    progress.started("CPU-PyTorch-1", (), path)
    progress.tick()
    assert "CPU-PyTorch-1" in out.getvalue() and "1✓ 1✗" in out.getvalue()
    quiet = io.StringIO()
    plain = Progress(quiet, live=False)
    plain.started("CPU-PyTorch-1", (), path)
    plain.tick()
    assert quiet.getvalue().count("\n") == 1, "plain output has no live line"
