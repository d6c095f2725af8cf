"""Read the JSONL test stream our pytest plugin writes (see ``harness/pytest_plugin.py``).

A stream cut short by a crash, a timeout or a signal is still read up to its last whole line; a
line that is not JSON marks the stream corrupt (with its line number) but keeps what came before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Stream:
    results: dict[str, dict] = field(default_factory=dict)  # test id -> its result record
    started: list[str] = field(default_factory=list)  # test ids in start order
    session_end: int | None = None  # pytest's exit status, when the session finished
    exists: bool = True
    problem: str | None = None  # why the stream is not whole (corrupt or truncated)

    @property
    def unfinished(self) -> list[str]:
        """Tests that started and never reported a result: the one that hung or crashed."""
        return [t for t in dict.fromkeys(self.started) if t not in self.results]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.results.values():
            counts[record["outcome"]] = counts.get(record["outcome"], 0) + 1
        return counts


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
            record = json.loads(line)
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
        elif record["event"] == "result":
            stream.results[record["test_id"]] = record
        elif record["event"] == "session_end":
            stream.session_end = record.get("exitstatus")
    return stream


def count_outcomes(path: Path) -> dict[str, int]:
    """Live pass/fail counts of a running shard (what the progress line shows)."""
    try:
        return read_stream(path).counts()
    except OSError:
        return {}
