"""The project's one pytest plugin, loaded only where it is named (``-p
stagebot.harness.run.pytest_plugin``): each shard stagebot starts, and stagebot's own test
sessions (its ``addopts``). It has no ``pytest11`` entry point, so an adopter's own pytest
sessions never load it, whatever virtual environment they share with stagebot.

It registers every harness suite's command-line options from a name -> module table, so
``pytest harness/suites/...`` accepts all of them wherever it is run from. A suite adds one line to
``SUITE_OPTIONS``; its options module exposes ``add_options(group)`` and must stay light (no torch
at import time), since every session that loads the plugin imports it.

It also carries the executor's options (group ``stagebot``), each plugin object registered only
when its option is given:

- ``--stagebot-jsonl PATH``: stream the collected test ids (``{"event": "collected", ...}``),
  then one JSON line per test as it starts and as it finishes (``{"event": "start"|"result",
  ...}``), flushed at once, so a crash or a timeout keeps every earlier result, the last
  ``start`` without a ``result`` names the test that hung and the tests that never started are
  known.
- ``--stagebot-waives FILE``: a JSON list of ``{"test_id", "reason"}``; matching tests are skipped
  with ``stagebot waive: <reason>`` and streamed with outcome ``waived``.
- ``--stagebot-select FILE`` / ``--stagebot-deselect FILE``: newline-separated test ids to keep /
  drop (a shard's share of its family, and the tests reused from an earlier pipeline).

- ``--stagebot-observe FOLDER``: record what each test file's collection and tests opened,
  imported and started (``harness/reuse/observe.py``: the observed part of a dependency key).

A failed test's log ends with a ``stagebot: load`` section: the host's load average when it
failed, so a limit that ran out (a rank's deadline) is judged with it.

And it keeps stagebot's code folders from shadowing installed distributions of their bare names
(stagebot.harness.run.own_names): the package root leaves ``sys.path`` before any conftest
loads, and stagebot's own test modules and conftests are imported by their ``stagebot.`` names.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path

import pytest

from stagebot.harness.run import own_names
from stagebot.harness.run.process import load_average
from stagebot.stages.patterns import waive_matches

SUITE_OPTIONS: dict[str, str] = {
    "sharding_ir": "stagebot.harness.suites.sharding_ir.options",
    "nvfp4_moe": "stagebot.harness.suites.nvfp4_moe.options",
}
WAIVE_PREFIX = "stagebot waive: "
LOG_LIMIT = 32_000  # characters of a test's failure text kept in the stream (heads and ends)
LOAD_SECTION = "stagebot: load"  # the host's load when a test failed (a section of its log)


def pytest_addoption(parser) -> None:
    for suite, module_name in SUITE_OPTIONS.items():
        group = parser.getgroup(f"stagebot-{suite}", f"stagebot suite {suite}")
        importlib.import_module(module_name).add_options(group)
    group = parser.getgroup("stagebot", "stagebot executor")
    group.addoption(
        "--stagebot-jsonl",
        dest="stagebot_jsonl",
        metavar="PATH",
        default=None,
        help="stream each test's outcome to this JSONL file as it finishes",
    )
    group.addoption(
        "--stagebot-waives",
        dest="stagebot_waives",
        metavar="FILE",
        default=None,
        help='skip the tests a JSON list of {"test_id", "reason"} names, with the reason',
    )
    group.addoption(
        "--stagebot-select",
        dest="stagebot_select",
        metavar="FILE",
        default=None,
        help="run only the test ids listed in FILE (one per line)",
    )
    group.addoption(
        "--stagebot-deselect",
        dest="stagebot_deselect",
        metavar="FILE",
        default=None,
        help="drop the test ids listed in FILE (one per line)",
    )
    group.addoption(
        "--stagebot-observe",
        dest="stagebot_observe",
        metavar="FOLDER",
        default=None,
        help="record the files each test file opened and imported, for its dependency key",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    """Before pytest loads the conftests of its arguments' folders and their parents."""
    own_names.drop_package_root()
    own_names.keep_children_off()
    for arg in args:
        if arg.startswith("-"):
            continue
        anchor = Path(os.path.abspath(early_config.invocation_params.dir / arg.split("::")[0]))
        for folder in (anchor, *anchor.parents):
            _adopt_own_conftest(early_config.pluginmanager, folder / "conftest.py")


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent):
    """A folder of stagebot's is collected as a plain directory (a ``pytest.Package`` would
    import its ``__init__.py`` by a bare name), its conftest adopted before pytest looks for it."""
    if own_names.canonical_name(path / "__init__.py") is None:
        return None
    _adopt_own_conftest(parent.config.pluginmanager, path / "conftest.py")
    return pytest.Dir.from_parent(parent, path=path)


def _adopt_own_conftest(pluginmanager, conftest: Path) -> None:
    """Registers a conftest of stagebot's, imported by its ``stagebot.`` name, under the name
    pytest looks it up by (its path), so that pytest never imports it by a bare name."""
    name = own_names.canonical_name(conftest)
    if name is None or not conftest.is_file() or pluginmanager.get_plugin(str(conftest)):
        return
    module = importlib.import_module(name)
    pluginmanager.register(module, name=str(conftest))
    # pytest scopes a conftest's path hooks by this set, as for the conftests it imports itself
    pluginmanager._conftest_plugins.add(module)


def pytest_pycollect_makemodule(module_path: Path, parent):
    if own_names.canonical_name(module_path) is not None:
        return OwnTestModule.from_parent(parent, path=module_path)
    return None


class OwnTestModule(pytest.Module):
    """A test module of stagebot's, imported by its ``stagebot.`` name (pytest's own import
    would name it after the folders, registering e.g. ``harness`` as a module)."""

    def _getobj(self):
        module = importlib.import_module(own_names.canonical_name(self.path))
        self.config.pluginmanager.consider_module(module)
        return module


def pytest_configure(config) -> None:
    for option in ("stagebot_waives", "stagebot_select", "stagebot_deselect"):
        path = config.getoption(option)
        if path is not None and not Path(path).is_file():
            flag = "--" + option.replace("_", "-")
            raise pytest.UsageError(f"[stagebot] {flag} {path}: no such file; give an existing one")
    if config.getoption("stagebot_jsonl"):
        config.pluginmanager.register(
            TestStream(config.getoption("stagebot_jsonl")), "stagebot-jsonl"
        )
    if config.getoption("stagebot_observe"):
        from stagebot.harness.reuse.observe import Observer

        folder = Path(config.getoption("stagebot_observe"))
        config.pluginmanager.register(
            Observer(config.invocation_params.dir, folder), "stagebot-observe"
        )
    if any(
        config.getoption(o) for o in ("stagebot_waives", "stagebot_select", "stagebot_deselect")
    ):
        config.pluginmanager.register(Selection(config), "stagebot-selection")


class Selection:
    """Applies the select / deselect lists and the waives at collection time."""

    def __init__(self, config) -> None:
        self.waives = _read_json(config.getoption("stagebot_waives")) or []
        self.select = _read_ids(config.getoption("stagebot_select"))
        self.deselect = _read_ids(config.getoption("stagebot_deselect")) or set()

    def pytest_collection_modifyitems(self, session, config, items) -> None:
        keep, drop = [], []
        for item in items:
            wanted = self.select is None or item.nodeid in self.select
            (keep if wanted and item.nodeid not in self.deselect else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
        for item in items:
            for waive in self.waives:
                if waive_matches(item.nodeid, waive["test_id"]):
                    item.add_marker(pytest.mark.skip(reason=WAIVE_PREFIX + waive["reason"]))
                    break


class TestStream:
    """Writes ``start`` / ``result`` records, one JSON line each, flushed as they happen."""

    __test__ = False

    def __init__(self, path: str) -> None:
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the session
        self.reports: dict[str, list] = {}

    def _write(self, record: dict) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self._write(
                {
                    "event": "result",
                    "test_id": report.nodeid or "<collection>",
                    "outcome": "error",
                    "phase": "collect",
                    "duration_s": 0.0,
                    "log": _text(report, LOG_LIMIT),
                    "time": time.time(),
                }
            )

    def pytest_collection_finish(self, session) -> None:
        """Every test the session will run: one that never reports a result is not lost."""
        self._write({"event": "collected", "test_ids": [item.nodeid for item in session.items]})

    def pytest_runtest_logstart(self, nodeid, location) -> None:
        self.reports[nodeid] = []
        self._write({"event": "start", "test_id": nodeid, "time": time.time()})

    def pytest_runtest_logreport(self, report) -> None:
        self.reports.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(self, nodeid, location) -> None:
        reports = self.reports.pop(nodeid, [])
        outcome, phase, log = _outcome(reports)
        self._write(
            {
                "event": "result",
                "test_id": nodeid,
                "outcome": outcome,
                "phase": phase,
                "duration_s": round(sum(r.duration for r in reports), 6),
                "log": log[:LOG_LIMIT],
                "time": time.time(),
            }
        )

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        self._write({"event": "session_end", "exitstatus": int(exitstatus), "time": time.time()})

    def pytest_unconfigure(self, config) -> None:
        self.file.close()


def _outcome(reports) -> tuple[str, str, str]:
    """(outcome, phase, log) of one test from its setup / call / teardown reports."""
    for report in reports:
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
            load = f"\n----- {LOAD_SECTION} -----\n{load_average()}"
            return outcome, report.when, _text(report, LOG_LIMIT - len(load)) + load
    for report in reports:
        if report.skipped:
            if hasattr(report, "wasxfail"):
                return "xfailed", report.when, f"xfailed: {report.wasxfail}"
            reason = _skip_reason(report)
            if reason.startswith(WAIVE_PREFIX):
                return "waived", report.when, reason.removeprefix(WAIVE_PREFIX)
            return "skipped", report.when, reason
    return "passed", "call", ""


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr or "")


def _clip(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters: its first quarter (the error) and its end (where
    the captured output ends), the middle cut with a line that says how much."""
    if len(text) <= limit:
        return text
    head = limit // 4
    end = max(limit - head - 40, 0)  # 40: room for the line that says what was cut
    return f"{text[:head]}\n… {len(text) - head - end} characters cut …\n{text[len(text) - end :]}"


def _text(report, limit: int) -> str:
    """The failure text and each captured section, each kept within its share of ``limit``."""
    sections = getattr(report, "sections", [])
    share = limit // (1 + len(sections))
    text = _clip(report.longreprtext or "", share)
    for name, content in sections:
        text += f"\n----- {name} -----\n{_clip(content, share)}"
    return text


def _read_json(path: str | None):
    return None if path is None else json.loads(Path(path).read_text(encoding="utf-8"))


def _read_ids(path: str | None) -> set[str] | None:
    if path is None:
        return None
    return {line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line}
