"""Read the JSONL test stream our pytest plugin writes (see ``harness/run/pytest_plugin.py``).

A stream cut short by a crash, a timeout or a signal is still read up to its last whole line; a
line that is not JSON marks the stream corrupt (with its line number) but keeps what came before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from stagebot.harness.decoding import clean_json


@dataclass
class Stream:
    results: dict[str, dict] = field(default_factory=dict)  # test id -> its result record
    started: list[str] = field(default_factory=list)  # test ids in start order
    start_times: dict[str, float] = field(default_factory=dict)  # test id -> its last start (epoch)
    collected: list[str] = field(default_factory=list)  # what the sessions were to run
    session_end: int | None = None  # pytest's exit status, when the session finished
    exists: bool = True
    problem: str | None = None  # why the stream is not whole (corrupt or truncated)

    @property
    def unfinished(self) -> list[str]:
        """Tests that started and never reported a result: the one that hung or crashed."""
        return [t for t in dict.fromkeys(self.started) if t not in self.results]

    @property
    def never_started(self) -> list[str]:
        """Collected tests that never started: the session ended before them."""
        started = set(self.started)
        return [t for t in dict.fromkeys(self.collected) if t not in started]


def read_stream(path: Path) -> Stream:
    if not path.exists():
        return Stream(exists=False)
    stream = Stream()
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = clean_json(json.loads(line))
            if not isinstance(record, dict) or "event" not in record:
                raise ValueError("not a stream record")
        except ValueError:
            last = number == len(lines)
            stream.problem = stream.problem or (
                f"{path.name} is truncated (line {number} is cut short)"
                if last
                else f"{path.name} is corrupt (line {number} is not a JSON record)"
            )
            continue  # keep the records after a damaged line
        if record["event"] == "start":
            stream.started.append(record["test_id"])
            if isinstance(record.get("time"), (int, float)):
                stream.start_times[record["test_id"]] = float(record["time"])
        elif record["event"] == "result":
            stream.results[record["test_id"]] = record
        elif record["event"] == "collected":
            stream.collected.extend(record.get("test_ids") or [])
        elif record["event"] == "session_end":
            stream.session_end = record.get("exitstatus")
    return stream


class LiveCounts:
    """Outcome counts of a stream still being written (what the progress line shows).

    Each call reads only the bytes appended since the last one, up to the last whole line (a
    line being written is read next time), so a long shard is not re-parsed every redraw. A
    rerun's result replaces the earlier one for its test; lines that are not records are skipped;
    a file shorter than what was read (replaced by a new run of the shard) is counted afresh.
    """

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.outcomes: dict[str, str] = {}  # test id -> latest outcome

    def counts(self) -> dict[str, int]:
        try:
            with self.path.open("rb") as stream:
                if stream.seek(0, 2) < self.offset:
                    self.offset, self.outcomes = 0, {}
                stream.seek(self.offset)
                appended = stream.read()
        except OSError:  # not created yet, or gone: what was counted stands
            appended = b""
        whole = appended.rfind(b"\n") + 1
        for line in appended[:whole].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("event") == "result":
                self.outcomes[record["test_id"]] = record["outcome"]
        self.offset += whole
        counts: dict[str, int] = {}
        for outcome in self.outcomes.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        return counts
