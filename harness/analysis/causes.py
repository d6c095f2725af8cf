"""What an ERROR shard records as its evidence: the cause line, then the last lines of its log.

The log holds the process's stdout and stderr together, so its tail is where pytest's own
complaints are (``No module named pytest``, ``INTERNALERROR``, the end of a collection traceback).
When the environment is to blame (no pytest or no stagebot plugin in the shard's Python, a
module the repository does not hold, an interpreter that cannot start), the cause line opens with
``environment:`` and says what to install: re-running the same environment fails the same way.
Logs are read as a bounded tail, never whole.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from stagebot.harness.decoding import text_of

ENVIRONMENT = "environment:"
TAIL_BYTES = 16_000
TAIL_LINES = 12
MAX_LINE = 300
NO_MODULE = re.compile(r"No module named '?(?P<name>[\w.]+)'?")
NO_PLUGIN = re.compile(r"unrecognized arguments: .*--stagebot-")
HARNESS_EXTRA = "install stagebot with its [harness] extra (pip install 'stagebot[harness]')"


def read_tail(path: Path | None, size: int = TAIL_BYTES) -> str:
    """The last ``size`` bytes of the file at ``path`` as text ("" when it cannot be read)."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(file.tell() - size, 0))
            return text_of(file.read())
    except OSError:
        return ""


def environment_cause(tail: str, python: str, root: Path) -> str | None:
    """Why the shard's environment cannot run it, from its log's tail; None when it can."""
    if NO_PLUGIN.search(tail):
        return f"the stagebot pytest plugin is not installed for {python}: {HARNESS_EXTRA}"
    for found in reversed(list(NO_MODULE.finditer(tail))):
        name = found["name"]
        if name == "pytest":
            return f"{python} has no pytest (No module named pytest): {HARNESS_EXTRA}"
        top = name.split(".")[0]
        if top != "stagebot" and not _in_repository(top, root):
            return (
                f"module {name!r} is not installed for {python} (No module named {name!r}; "
                "not a module of this repository): install it, or the stagebot extra that needs it"
            )
    return None


def unusable_interpreter(python: str, error: OSError) -> str:
    return f"{ENVIRONMENT} cannot start the shard's Python {python}: {error.strerror or error}"


def error_evidence(problem: str, tail: str, environment: str | None = None) -> str:
    """The evidence of an ERROR shard: ``problem`` (or the environment's cause, which then
    replaces it) on the first line, the log's last lines below it."""
    first = f"{ENVIRONMENT} {environment}" if environment else problem
    lines = [_clip(line) for line in tail.splitlines() if line.strip()][-TAIL_LINES:]
    return "\n".join([first, *lines]) if lines else first


def cause_line(evidence: str | None) -> str:
    """The first line of an evidence text: its cause, without the log's tail."""
    return (evidence or "").split("\n", 1)[0]


def is_environment(evidence: str | None) -> bool:
    return cause_line(evidence).startswith(ENVIRONMENT)


def _in_repository(top: str, root: Path) -> bool:
    return (root / top).is_dir() or (root / f"{top}.py").is_file()


def _clip(line: str) -> str:
    line = line.rstrip()
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"
