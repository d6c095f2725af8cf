"""Likely causes of a NEW failure: the PR's changed files, ranked by evidence.

1. "in traceback": a changed file is a frame of the failure's traceback (strongest);
2. "imported by the test": a changed file is in the test module's import closure;
3. "the stage's run_if_changed": the catalog ties the file to the stage (weakest).

A changed file that merely lies in the test's folder is no suspect: proximity is no evidence.

The import closure is read statically with ``ast`` from the test file and the repository's own
modules (``harness/reuse/import_graph.py`` says why not grimp or modulefinder).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from stagebot.harness.reuse.import_graph import import_closure
from stagebot.stages.patterns import path_matches

MAX_SUSPECTS = 3
_FRAME = re.compile(r'File "(?P<path>[^"]+\.py)", line \d+|^(?P<short>[\w./\\-]+\.py):\d+: ', re.M)


@dataclass(frozen=True)
class Suspect:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path} ({self.reason})"


def rank_suspects(
    test_id: str,
    log: str | None,
    changed_files: list[str] | None,
    *,
    root: Path | None = None,
    stage_patterns: tuple[str, ...] = (),
) -> tuple[Suspect, ...]:
    """At most MAX_SUSPECTS changed files, strongest evidence first."""
    if not changed_files:
        return ()
    test_file = test_id.split("::")[0]
    frames = traceback_files(log or "", root)
    closure = import_closure(str(root.resolve()), test_file) if root else frozenset()
    found: dict[str, str] = {}
    for path in changed_files:
        in_frames = any(frame == path or frame.endswith("/" + path) for frame in frames)
        if in_frames and path != test_file:  # the test's own frame is always there
            found.setdefault(path, "in traceback")
    for path in changed_files:
        if path in closure and path != test_file:
            found.setdefault(path, "imported by the test")
        elif path == test_file:
            found.setdefault(path, "the test file itself")
    for path in changed_files:
        if stage_patterns and path_matches(path, stage_patterns):
            found.setdefault(path, "the stage's run_if_changed")
    order = ["in traceback", "imported by the test", "the test file itself"]
    ranked = sorted(found.items(), key=lambda kv: order.index(kv[1]) if kv[1] in order else 9)
    return tuple(Suspect(path, reason) for path, reason in ranked[:MAX_SUSPECTS])


def traceback_files(log: str, root: Path | None) -> list[str]:
    """The traceback's file paths, relative to ``root`` where they lie under it."""
    base = str(root.resolve()) + os.sep if root else None
    paths = []
    for match in _FRAME.finditer(log):
        path = (match["path"] or match["short"]).replace("\\", "/")
        if base and path.startswith(base):
            path = path[len(base) :]
        paths.append(path)
    return paths
