"""The project's one pytest plugin (entry point ``pytest11``: ``stagebot``).

It registers every harness suite's command-line options from a name -> module table, so
``pytest harness/suites/...`` accepts all of them wherever it is run from. A suite adds one line to
``SUITE_OPTIONS``; its options module exposes ``add_options(group)`` and must stay light (no torch
at import time), since every pytest run in an environment with stagebot installed loads it.

It also carries the executor's options (group ``stagebot``), each plugin object registered only
when its option is given:

- ``--stagebot-jsonl PATH``: stream one JSON line per test as it starts and as it finishes
  (``{"event": "start"|"result", ...}``), flushed at once, so a crash or a timeout keeps every
  earlier result and the last ``start`` without a ``result`` names the test that hung.
- ``--stagebot-waives FILE``: a JSON list of ``{"test_id", "reason"}``; matching tests are skipped
  with ``stagebot waive: <reason>`` and streamed with outcome ``waived``.
- ``--stagebot-select FILE`` / ``--stagebot-deselect FILE``: newline-separated test ids to keep /
  drop (a shard's share of its family, and the tests reused from an earlier pipeline).

A failed test's log ends with a ``stagebot: load`` section: the host's load average when it
failed, so a limit that ran out (a rank's deadline) is judged with it.
"""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

from stagebot.harness.run.process import load_average
from stagebot.stages.patterns import waive_matches

SUITE_OPTIONS: dict[str, str] = {
    "sharding_ir": "stagebot.harness.suites.sharding_ir.options",
    "nvfp4_moe": "stagebot.harness.suites.nvfp4_moe.options",
}
WAIVE_PREFIX = "stagebot waive: "
LOG_LIMIT = 32_000  # characters of a test's failure text kept in the stream
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


def pytest_configure(config) -> None:
    import pytest

    for option in ("stagebot_waives", "stagebot_select", "stagebot_deselect"):
        path = config.getoption(option)
        if path is not None and not Path(path).is_file():
            flag = "--" + option.replace("_", "-")
            raise pytest.UsageError(f"[stagebot] {flag} {path}: no such file; give an existing one")
    if config.getoption("stagebot_jsonl"):
        config.pluginmanager.register(
            TestStream(config.getoption("stagebot_jsonl")), "stagebot-jsonl"
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
        import pytest

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
                    "log": _text(report)[:LOG_LIMIT],
                    "time": time.time(),
                }
            )

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
            return outcome, report.when, _text(report)[: LOG_LIMIT - len(load)] + load
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


def _text(report) -> str:
    text = report.longreprtext or ""
    for name, content in getattr(report, "sections", []):
        text += f"\n----- {name} -----\n{content}"
    return text


def _read_json(path: str | None):
    return None if path is None else json.loads(Path(path).read_text(encoding="utf-8"))


def _read_ids(path: str | None) -> set[str] | None:
    if path is None:
        return None
    return {line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line}
