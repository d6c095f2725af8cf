"""The observed part of a dependency key: what a shard's tests really opened, imported and started.

The static reading (``import_graph``) cannot see a file opened by a path computed at run time (a
data path read from a settings file, a name joined in a loop) or a program whose name is computed.
A run can: ``Observer`` is a pytest plugin that installs an audit hook (``sys.addaudithook``) and
records, per test file (its collection and its tests), the repository files opened for reading,
the repository modules imported, and the programs started that may run repository code. The
shard writes them to ``observed/`` in its folder; its keys (``offers.KeyCheck.write``) add those
files to the key, and the next run's offer carries them, so the next key digests them too
(docs/reuse.md, "Static and observed").

An audit hook cannot be removed: after the session it stays, inert (``current`` is None).
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from stagebot.harness.reuse.dependency_key import Observation

FOLDER = "observed"  # in the shard folder: one JSON file per pytest session
# Programs that run whatever code they are given (our code among it).
_RUNS_CODE = ("python", "pytest", "bot", "sh", "bash", "dash", "zsh", "env")
_PROCESS_EVENTS = {"subprocess.Popen": 1, "os.exec": 1, "os.posix_spawn": 1, "os.spawn": 2}
_WRITE_MODES = ("w", "a", "x")


class Observer:
    """A pytest plugin recording what each test file's collection and tests did."""

    def __init__(self, root: Path, folder: Path) -> None:
        self.root = str(root.resolve()) + os.sep
        self.folder = folder
        self.current: str | None = None  # the test file being collected or run
        self.opened: dict[str, set[str]] = defaultdict(set)
        self.modules: dict[str, set[str]] = defaultdict(set)
        self.started: dict[str, set[str]] = defaultdict(set)
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        current = self.current
        if current is None:
            return
        if event == "open":
            path, mode = args[0], args[1]
            if isinstance(mode, str) and mode.startswith(_WRITE_MODES) and "+" not in mode:
                return
            if isinstance(path, str | bytes | os.PathLike):
                relative = self._relative(os.fsdecode(path))
                if relative is not None:
                    self.opened[current].add(relative)
        elif event == "import":
            self.modules[current].add(args[0])
        elif event in _PROCESS_EVENTS:
            self._program(current, args[_PROCESS_EVENTS[event]])
        elif event == "os.system":
            self.started[current].add(str(args[0])[:200])

    def _relative(self, path: str) -> str | None:
        """``path`` relative to the root, a cached module's ``.pyc`` read as its source; None
        outside the root."""
        absolute = os.path.abspath(path)
        if not absolute.startswith(self.root):
            return None
        relative = absolute[len(self.root) :].replace(os.sep, "/")
        folder, _, name = relative.rpartition("/")
        if folder.endswith("__pycache__") and name.endswith(".pyc"):
            parent = folder.removesuffix("__pycache__").rstrip("/")
            relative = (f"{parent}/" if parent else "") + name.split(".")[0] + ".py"
        return relative

    def _program(self, current: str, argv: object) -> None:
        words = [os.fsdecode(w) for w in argv] if isinstance(argv, list | tuple) else [str(argv)]
        program = os.path.basename(words[0]) if words else ""
        ours = any(self._relative(w) is not None and os.path.exists(w) for w in words)
        if ours or program.startswith(_RUNS_CODE):
            self.started[current].add(" ".join(words)[:200])

    def pytest_collectstart(self, collector) -> None:
        path = getattr(collector, "path", None)
        if path is not None and path.suffix == ".py":
            self.current = self._relative(str(path))

    def pytest_collectreport(self, report) -> None:
        self.current = None

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        self.current = nodeid.split("::")[0]

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        self.current = None

    def pytest_sessionfinish(self, session) -> None:
        self.current = None
        records = {}
        for test_file in sorted(self.opened.keys() | self.modules.keys() | self.started.keys()):
            modules = (sys.modules.get(name) for name in self.modules.get(test_file, ()))
            files = {
                self._relative(module.__file__)
                for module in modules
                if getattr(module, "__file__", None)
            }
            files = {f for f in files | self.opened.get(test_file, set()) if f is not None}
            records[test_file] = {
                "files": sorted(files),
                "started": sorted(self.started.get(test_file, ())),
            }
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"observed-{os.getpid()}.json"
        path.write_text(json.dumps(records), encoding="utf-8")


def read_observations(folder: Path, test_files: Iterable[str]) -> dict[str, Observation]:
    """Test file -> what its runs observed (every session's record joined), for the test files
    among ``test_files`` that a session recorded; unreadable records are skipped (those test
    files then have no observation: their keys stay static, or conservative where static is
    not enough)."""
    wanted = set(test_files)
    files: dict[str, set[str]] = defaultdict(set)
    started: dict[str, set[str]] = defaultdict(set)
    for record in sorted(folder.glob("observed-*.json")) if folder.is_dir() else ():
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
            for test_file, seen in data.items():
                if test_file in wanted:
                    files[test_file].update(map(str, seen["files"]))
                    started[test_file].update(map(str, seen["started"]))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            continue
    return {
        test_file: Observation(tuple(sorted(files[test_file])), tuple(sorted(started[test_file])))
        for test_file in files.keys() | started.keys()
    }
