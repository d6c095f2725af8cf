"""Likely causes of a NEW failure: the PR's changed files, ranked by evidence.

1. "in traceback": a changed file is a frame of the failure's traceback (strongest);
2. "imported by the test": a changed file is in the test module's import closure;
3. "same folder as the test" / "the stage's run_if_changed": proximity only (weakest).

The import closure is read statically with ``ast`` from the test file and the repository's own
modules. Not ``grimp``: it builds a graph of one installed, importable top-level package, while a
test file is usually no package member and the code under test may not be installed in the
report job. Not ``modulefinder``: it follows every import (the standard library, torch) on the
current ``sys.path``, slowly, and needs the test run's path. ``ast`` reads each file once, never
runs code (importing a GPU test would initialise CUDA), and also reads a file that fails to import.
A module name resolves to the repository file whose dotted path ends with it (``mathlib`` ->
``src/mathlib.py``; nearest to the root on a tie), so src layouts and package-dir mappings work
without knowing ``sys.path``.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath

from stagebot.stages.patterns import path_matches

MAX_SUSPECTS = 3
_SKIP_DIRS = {".git", "node_modules", "__pycache__", "out", "build", "dist", ".venv", "venv"}
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
    frames = _frames(log or "", root)
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
    test_dir = PurePosixPath(test_file).parent
    for path in changed_files:
        if PurePosixPath(path).parent == test_dir and "::" in test_id:
            found.setdefault(path, "same folder as the test")
        elif stage_patterns and path_matches(path, stage_patterns):
            found.setdefault(path, "the stage's run_if_changed")
    order = ["in traceback", "imported by the test", "the test file itself"]
    ranked = sorted(found.items(), key=lambda kv: order.index(kv[1]) if kv[1] in order else 9)
    return tuple(Suspect(path, reason) for path, reason in ranked[:MAX_SUSPECTS])


def _frames(log: str, root: Path | None) -> list[str]:
    """The traceback's file paths, relative to ``root`` where they lie under it."""
    base = str(root.resolve()) + os.sep if root else None
    paths = []
    for match in _FRAME.finditer(log):
        path = (match["path"] or match["short"]).replace("\\", "/")
        if base and path.startswith(base):
            path = path[len(base) :]
        paths.append(path)
    return paths


@lru_cache(maxsize=8)
def _module_index(root: str) -> Mapping[str, tuple[str, ...]]:
    """Dotted name (every suffix of a file's dotted path) -> repository files, nearest first."""
    index: dict[str, list[str]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in files:
            if not name.endswith(".py"):
                continue
            relative = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            parts = relative[:-3].split("/")
            if parts[-1] == "__init__":
                parts.pop()
            for start in range(len(parts)):
                index.setdefault(".".join(parts[start:]), []).append(relative)
    return {name: tuple(sorted(paths, key=lambda p: p.count("/"))) for name, paths in index.items()}


def _resolve(index: Mapping[str, tuple[str, ...]], name: str) -> list[str]:
    """The files ``import name`` runs: the module and its parent packages (nearest match)."""
    found = []
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        dotted = ".".join(parts[:end])
        candidates = index.get(dotted) or (index.get(".".join(parts[1:end])) if end > 1 else None)
        if candidates:
            depth = candidates[0].count("/")
            found += [path for path in candidates if path.count("/") == depth]
    return found


def _imports(root: str, path: str) -> list[str]:
    try:
        tree = ast.parse(Path(root, path).read_text(errors="replace"), filename=path)
    except (OSError, SyntaxError, ValueError):
        return []
    package = PurePosixPath(path).parent.parts
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                module = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names.append(module)
            names += [f"{module}.{alias.name}" for alias in node.names if alias.name != "*"]
    return [name for name in names if name]


@lru_cache(maxsize=256)
def import_closure(root: str, test_file: str) -> frozenset[str]:
    """Every repository file the test file imports, directly or through other repository files."""
    index = _module_index(root)
    seen, todo = {test_file}, [test_file]
    while todo:
        for name in _imports(root, todo.pop()):
            for path in _resolve(index, name):
                if path not in seen:
                    seen.add(path)
                    todo.append(path)
    return frozenset(seen)
