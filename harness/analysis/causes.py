"""What an ERROR shard records as its evidence: the cause line, then the last lines of its log.

The log holds the process's stdout and stderr together, so its tail is where pytest's own
complaints are (``No module named pytest``, ``INTERNALERROR``, the end of a collection traceback).
When the environment is to blame (no pytest or no stagebot plugin in the shard's Python, a
module the repository does not hold, an interpreter that cannot start), the cause line opens with
``environment:`` and says what to install: re-running the same environment fails the same way.
Logs are read as a bounded tail, never whole.

A test can meet the environment's fault too: an installed package that fails to import (the
import error raised in a frame under site-packages) is no fault of the code under test, however
many tests it fails (`installed_import_fault`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from stagebot.harness.decoding import text_of
from stagebot.harness.results import ENVIRONMENT_META, environment_items

ENVIRONMENT = "environment:"
TAIL_BYTES = 16_000
TAIL_LINES = 12
MAX_LINE = 300
NO_MODULE = re.compile(r"No module named '?(?P<name>[\w.]+)'?")
NO_PLUGIN = re.compile(r"unrecognized arguments: .*--stagebot-")
HARNESS_EXTRA = "install stagebot with its [harness] extra (pip install 'stagebot[harness]')"
_IMPORT_ERROR = re.compile(r"\b(?:ModuleNotFoundError|ImportError): [^\n]*")
_RAISED_AT = re.compile(r"^(?P<path>\S+\.py):\d+: (?:ModuleNotFoundError|ImportError)$", re.M)
_FRAME = re.compile(r'File "(?P<path>[^"<][^"]*)", line \d+')
_INSTALLED = re.compile(r"[/\\](?:site|dist)-packages[/\\](?P<top>[A-Za-z0-9_]+)")
_IMPORTED_FROM = re.compile(r"from '(?P<module>[\w.]+)' \((?P<path>[^)]+)\)")


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


def installed_import_fault(text: str, environment: Sequence[str] | None) -> str | None:
    """``environment: <package> <version> fails to import: <error>`` when the last import error
    in a failed test's ``text`` (its evidence and log) was raised inside an installed package
    (pytest's ``path:line: ImportError`` line, else the last frame before the error), naming
    the module it imported when that came from outside site-packages (a folder shadowing an
    installed distribution); None otherwise. ``environment``: the shard's
    ``StageResult.environment`` lines, for the versions."""
    errors = list(_IMPORT_ERROR.finditer(text))
    if not errors:
        return None
    error = errors[-1][0].rstrip(" -")
    raised = [m["path"] for m in _RAISED_AT.finditer(text)]
    frames = raised or [m["path"] for m in _FRAME.finditer(text, 0, errors[-1].start())]
    installed = _INSTALLED.search(frames[-1]) if frames else None
    if installed is None:
        return None
    versions = _versions(environment)
    package = installed["top"]
    cause = f"{ENVIRONMENT} {_named(package, versions)} fails to import: {_clip(error)}"
    shadow = _IMPORTED_FROM.search(error)
    if shadow and not _INSTALLED.search(shadow["path"]):
        top = shadow["module"].split(".")[0]
        cause += (
            f" ({top!r} came from {shadow['path']}, outside site-packages: a folder of that name "
            f"is ahead of the installed {_named(top, versions)} on sys.path)"
        )
    return cause


def _versions(environment: Sequence[str] | None) -> dict[str, str]:
    """Module-like name -> version of each distribution in a StageResult's ``environment``."""
    items = environment_items(environment or ()).items()
    return {
        name.lower().replace("-", "_"): version
        for name, version in items
        if name not in ENVIRONMENT_META
    }


def _named(module: str, versions: Mapping[str, str]) -> str:
    version = versions.get(module.lower())
    return f"{module} {version}" if version else module


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
