"""Evidence: the one line that says why a test failed, and the numbers of a numeric mismatch.

Pure functions over failure text (a pytest longrepr, a log tail). The line is the real error, read
in the last block of ``E`` lines (the final exception of a chain): the line that names an
exception, else its first ``E`` line, else the last line that looks like ``SomeError: …`` — never
a bare "exit code 1". Numeric mismatches are read from
``torch.testing.assert_close`` and ``numpy.testing.assert_allclose`` messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

EXCEPTION_LINE = re.compile(
    r"^(?:[\w.]+\.)?(?:[A-Z]\w*(?:Error|Exception|Failure|Exit)|AssertionError|Failed|KeyboardInterrupt)\b:?"
)  # noqa: E501
E_LINE = re.compile(r"^E\s+(?P<text>\S.*)$")
_E_MARK = re.compile(r"^E(?:\s|$)")  # pytest's mark of an exception line (or its blank line)
PLAIN_ERROR = re.compile(r"^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b(?::.*)?$")
MISMATCHED = re.compile(r"Mismatched elements:\s*(?P<n>\d+)\s*/\s*(?P<total>\d+)")
_DIFF = (
    r"(?:Greatest|Max) {} difference(?: among violations)?:\s*(?P<v>[-+\w.]+)"
    r"(?:\s+at index (?P<at>\([^)]*\)|\d+))?"
)
ABS_DIFF = re.compile(_DIFF.format("absolute"))
REL_DIFF = re.compile(_DIFF.format("relative"))
MAX_LINE = 300
_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (colours, cursor moves, OSC titles)."""
    return _ANSI.sub("", text)


@dataclass(frozen=True)
class Mismatch:
    """A numeric comparison's failure: how many elements differ, and by how much at most."""

    mismatched: int
    total: int
    max_abs: float | None
    max_abs_at: str | None
    max_rel: float | None
    max_rel_at: str | None

    def summary(self) -> str:
        parts = [f"{self.mismatched}/{self.total} elements mismatched"]
        if self.max_abs is not None:
            parts.append(f"max abs diff {self.max_abs:g}" + _at(self.max_abs_at))
        if self.max_rel is not None:
            parts.append(f"max rel diff {self.max_rel:g}" + _at(self.max_rel_at))
        return ", ".join(parts)


_SUMMARY = re.compile(
    r"(?P<n>\d+)/(?P<total>\d+) elements mismatched(?:, max abs diff (?P<abs>[-+\w.]+))?"
)


def summary_mismatch(evidence: str | None) -> Mismatch | None:
    """The numbers an evidence line carries (``Mismatch.summary``, as ``test_evidence`` writes
    it): another pipeline's failure, of which only the line is at hand."""
    found = _SUMMARY.search(evidence or "")
    if found is None:
        return None
    max_abs = _number(found["abs"]) if found["abs"] else None
    return Mismatch(int(found["n"]), int(found["total"]), max_abs, None, None, None)


def _at(index: str | None) -> str:
    return f" at {index}" if index else ""


def error_line(text: str | None) -> str | None:
    """The real error line of a failure text, or None when the text holds none."""
    if not text:
        return None
    lines = text.splitlines()
    e_lines = [m["text"].strip() for m in map(E_LINE.match, last_e_block(lines)) if m]
    named = [line for line in e_lines if EXCEPTION_LINE.match(line)]
    if named:
        # Prefer the exception line; pytest puts the assertion's own text on the line after
        # "AssertionError: ..." only when the message is multi-line, so keep the first named one
        # that carries a message.
        with_message = [line for line in named if ":" in line and not line.endswith(":")]
        line = (with_message or named)[0]
        if line.endswith(":"):  # the message starts on the next line (numpy, multi-line asserts)
            following = e_lines[e_lines.index(line) + 1 :]
            if following:
                line = f"{line} {following[0]}"
    elif e_lines:
        line = e_lines[0]
    else:
        plain = [line.strip() for line in lines if PLAIN_ERROR.match(line)]
        if not plain:
            return None
        line = plain[-1]
    return _clip(line)


def last_e_block(lines: list[str]) -> list[str]:
    """The lines of the final exception: pytest prints a chained exception's tracebacks in
    order, each ending in its ``E`` lines; the last run of them is what the test failed with."""
    ends = [i for i, line in enumerate(lines) if _E_MARK.match(line)]
    if not ends:
        return []
    start = ends[-1]
    while start > 0 and _E_MARK.match(lines[start - 1]):
        start -= 1
    return lines[start : ends[-1] + 1]


def mismatch(text: str | None) -> Mismatch | None:
    """The numbers of an assert_close / allclose failure in ``text``, or None."""
    if not text:
        return None
    found = MISMATCHED.search(text)
    if found is None:
        return None
    abs_diff, rel_diff = ABS_DIFF.search(text), REL_DIFF.search(text)
    return Mismatch(
        int(found["n"]),
        int(found["total"]),
        _number(abs_diff["v"]) if abs_diff else None,
        abs_diff["at"] if abs_diff else None,
        _number(rel_diff["v"]) if rel_diff else None,
        rel_diff["at"] if rel_diff else None,
    )


def test_evidence(text: str | None) -> str | None:
    """One line for a failed test: its error line, with the mismatch numbers when numeric."""
    line = error_line(text)
    numbers = mismatch(text)
    if numbers is not None:
        return _clip(f"{line or 'values differ'} — {numbers.summary()}")
    return line


test_evidence.__test__ = False  # not a pytest test, despite the name


def log_error_line(log: str) -> str | None:
    """The last error-looking line of a process log (for a crash or a failed command)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        match = E_LINE.match(line)
        if match or PLAIN_ERROR.match(line) or line.startswith(("Fatal Python error", "ERROR")):
            return _clip(match["text"] if match else line)
    return _clip(lines[-1]) if lines else None


def _number(raw: str) -> float | None:
    try:
        return float(raw.rstrip("."))
    except ValueError:
        return None


def fold_environ(line: str) -> str:
    """``os.environ``'s repr folded to ``environ({…})``: pytest's assertion rewriting prints it
    whole where a test compares with it, i.e. the stage job's environment in a reply anyone can
    read (and a signature that differs by runner). The line keeps what it was compared with."""
    return _ENVIRON.sub("environ({…})", line)


def _clip(line: str) -> str:
    line = " ".join(fold_environ(strip_ansi(line)).split())
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"


_ENVIRON = re.compile(r"environ\(\{.*?\}\)(?=[\s,)\]]|$)")
NEVER_RAN = "never ran: "  # a collected test the session ended before (the executor's line)
_NEVER_RAN_DURING = re.compile(r"^never ran: pytest ended during (?P<test>\S+) ")


def never_ran_evidence(during: str | None, exit_status: int | None) -> str:
    """The evidence of a collected test that never started: the test during which pytest
    ended (its culprit), else how the session ended."""
    if during:
        return f"{NEVER_RAN}pytest ended during {during} before this test started"
    how = f"exit {exit_status}" if exit_status is not None else "no exit status"
    return f"{NEVER_RAN}the pytest session ended ({how}) before this test started"


def never_ran_culprit(evidence: str | None) -> str | None:
    """The test during which pytest ended, as ``never_ran_evidence`` names it."""
    found = _NEVER_RAN_DURING.match(evidence or "")
    return found["test"] if found else None


_LOCATION_LINE = re.compile(r"^(?P<file>[\w./\\-]+\.py):\d+: (?:\w|$)")
_DEF_LINE = re.compile(r"^\s*(?:>\s*)?(?:async\s+)?def (?P<name>\w+)\(")
_NATIVE_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+\.py)", line \d+, in (?P<name>[\w<>]+)')


def failing_frame(log: str | None) -> str | None:
    """``file:function`` of the frame that raised a test's final exception, read from pytest's
    failure text (the last location line, and the last ``def`` shown before the final ``E``
    block), else from a Python traceback's last ``File "…", line N, in name``; None when the
    text names none."""
    lines = (log or "").split("\n----- ", 1)[0].splitlines()
    ends = [i for i, line in enumerate(lines) if _E_MARK.match(line)]
    located = [m for m in map(_LOCATION_LINE.match, lines) if m]
    if ends and located:
        names = [m["name"] for m in map(_DEF_LINE.match, lines[: ends[-1]]) if m]
        return f"{located[-1]['file']}:{names[-1]}" if names else located[-1]["file"]
    native = [m for m in map(_NATIVE_FRAME.match, lines) if m]
    return f"{native[-1]['file']}:{native[-1]['name']}" if native else None
