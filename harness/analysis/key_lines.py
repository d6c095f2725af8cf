"""The few lines of a failure's log that explain it, read from the END, where pytest puts them.

pytest writes a failure as: the traceback (source lines, then ``E`` lines: the exception, the
assertion with its numbers), the location line ``path:line: Error``, then the captured stdout /
stderr / log sections. The key lines are: the spawned ranks' verdicts, the last block of ``E``
lines, the location, the hypothesis example, the error lines and the tail of captured stderr,
and the executor's crash / timeout line. A log that is only the shard's output (the pytest
process died) gives its last lines.
"""

from __future__ import annotations

import re

from stagebot.harness.analysis.evidence import fold_environ, last_e_block, strip_ansi
from stagebot.harness.analysis.rules import read_sources

MAX_LINES = 14
MAX_CHARS = 300
STDERR_TAIL = 4
CRASH_FRAMES = 4  # innermost frames of a faulthandler dump kept
_LOCATION = re.compile(r"^[\w./\\-]+\.py:\d+: \w+")
_RANK_HEADER = re.compile(r"^--- rank \d+: .* ---$")
_NOTABLE = re.compile(
    r"Error\b|Exception\b|Watchdog|terminate called|Fatal Python error|Segmentation fault|"
    r"Falsifying example|Failing test case|Xid|No space left|out of memory|Timeout|FAIL",
)
# hypothesis's minimal failing input: "Falsifying example: …" (older) or "Failing test case: …".
_EXAMPLE = re.compile(r"^(?:Falsifying example|Failing test case): ")


def key_lines(
    evidence: str | None, log: str | None, shard_log_tail: str | None = None
) -> list[str]:
    """At most MAX_LINES lines (each at most MAX_CHARS, without terminal escapes) that say why
    the test failed."""
    sources = read_sources(evidence, log)
    message_lines = (log or "").split("\n----- ", 1)[0].splitlines()
    lines: list[str] = []
    lines += [line for line in message_lines if _RANK_HEADER.match(line)][:4]
    lines += _last_e_block(message_lines)
    lines += [line for line in message_lines if _LOCATION.match(line)][-1:]
    lines += [line for line in message_lines if _EXAMPLE.match(line)][-1:]
    stderr = [line for line in sources["stderr"].splitlines() if line.strip()]
    notable = [line for line in stderr if _NOTABLE.search(line)][-STDERR_TAIL:]
    tail = stderr[-STDERR_TAIL:]
    if stderr:
        lines += ["--- captured stderr (end) ---", *dict.fromkeys(notable + tail)]
    for source in ("exit", "timeout"):
        lines += sources[source].splitlines()[:1]
    if not log and shard_log_tail:
        lines += ["--- shard log ---", *_shard_lines(shard_log_tail)]
    if not lines and evidence:
        lines.append(evidence)
    unique = list(dict.fromkeys(line.rstrip() for line in lines if line.strip()))
    return [_clip(line) for line in unique[-MAX_LINES:]]


def _shard_lines(tail: str) -> list[str]:
    """A crash's lines of the shard's log: faulthandler's report (the error, then the crashing
    thread's innermost frames, most recent first), else the log's last lines."""
    shard = [line for line in tail.splitlines() if line.strip()]
    fatal = max(
        (i for i, line in enumerate(shard) if line.startswith("Fatal Python")), default=None
    )
    if fatal is None:
        return shard[-6:]
    current = next(
        (i for i in range(fatal, len(shard)) if shard[i].startswith("Current thread")), fatal
    )
    return [shard[fatal], *shard[current : current + CRASH_FRAMES + 1]]


def _last_e_block(lines: list[str], limit: int = 8) -> list[str]:
    """The last run of ``E`` lines (the final exception, after any re-raised ones), shortened."""
    block = last_e_block(lines)
    return block if len(block) <= limit else [*block[:2], "E   …", *block[-(limit - 3) :]]


def _clip(line: str) -> str:
    line = fold_environ(strip_ansi(line))
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 1] + "…"
