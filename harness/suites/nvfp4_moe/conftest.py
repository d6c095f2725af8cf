"""pytest glue for the NVFP4 MoE suite: fixtures, the backend tally and the forced-backend rule.

Each test of a dispatched op carries ``@pytest.mark.moe_op(name)``. The run ends with a table of
how many cases of each op every backend ran and how many skipped; with ``--moe-backend NAME`` a
case that skipped or ran elsewhere fails the session. A forced backend that runs on some devices
only (cute: CUDA) deselects the matrix cases of the other devices and the tests marked
``on_device`` for another device, and the controls run at the scale of a device it serves. A
BackendUnavailableError raised by an op turns the case into a skip with the backend's reason.

The cute kernels run with a pinned tactic, picked from the dispatcher's list by a hash of the
case's node id (so every tactic runs across the suite, a case keeps its tactic in any selection,
shard or rerun, and a failure names a fixed tactic, not the autotuner's pick: it is recorded as
the case's ``cute_tactic`` property); ``--cute-tactic NAME`` pins every case to one tactic
instead. The run ends with the launches per kernel and tactic.

With the kernel cache on, each case's compile keys are recorded beside it (kernel_manifest),
and a session compiles the kernels its cases will ask for (with the tactic each case is pinned
to now) in the order they ask, one process per core, while the cases run
(stagebot.kernels.cute.warm; ``STAGEBOT_CUTE_WARM_JOBS`` sets how many, 0 turns it off): each
case's record, or where the folder has none (a fresh machine), its keys in the committed plan
(kernel_plan), the latter on an sm_90 GPU only. The run ends with how many cases asked for a
key the plan lacks.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator

import pytest

from stagebot.harness.suites.nvfp4_moe import kernel_manifest, kernel_plan
from stagebot.harness.suites.nvfp4_moe.backend_report import BackendTally
from stagebot.harness.suites.nvfp4_moe.cases import CPU, GPU, NO_GPU, Case, Scale, WeightBank

TALLY = pytest.StashKey[BackendTally]()
DISPATCH_LOG = pytest.StashKey[list]()
FORCED_DEVICES = pytest.StashKey[tuple]()
PINNED_TACTIC = pytest.StashKey[object]()
WARMING = pytest.StashKey[object]()  # the warm running beside the cases
WARMED = pytest.StashKey[object]()  # its report
PLAN = pytest.StashKey[dict]()  # the committed plan's keys per case id, once loaded
UNPLANNED = pytest.StashKey[list]()  # (case, a key it asked for that the plan lacks, as text)
RECORDED = pytest.StashKey[list]()  # the cases whose keys were recorded
PREFIX = "[nvfp4_moe]"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "moe_op(name): the dispatched kernels op a case checks")
    config.addinivalue_line(
        "markers",
        "on_device(name): a test that checks the suite on that device only (deselected with "
        "that device's matrix cases)",
    )
    forced = config.getoption("moe_backend", default=None)
    if forced is not None:
        from stagebot.kernels import backends

        by_name = {b.name: b for b in backends.registered()}
        if forced not in by_name:
            raise pytest.UsageError(
                f"--moe-backend {forced!r}: it must be one of {sorted(by_name)}"
            )
        config.stash[FORCED_DEVICES] = by_name[forced].devices
    config.stash[TALLY] = BackendTally(forced=forced)
    if (name := config.getoption("cute_tactic", default=None)) is not None:
        from stagebot.kernels.cute.tactics import TACTICS

        by_name = {str(t): t for t in TACTICS}
        if name not in by_name:
            raise pytest.UsageError(f"--cute-tactic {name!r}: it must be one of {list(by_name)}")
        config.stash[PINNED_TACTIC] = by_name[name]


@pytest.fixture(scope="session")
def moe_backend(pytestconfig: pytest.Config) -> str:
    return pytestconfig.stash[TALLY].forced or "auto"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    devices = config.stash.get(FORCED_DEVICES, None)
    if devices is None:
        return
    kept, dropped = [], []
    for item in items:
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")
        marker = item.get_closest_marker("on_device")
        device = case.scale.device if isinstance(case, Case) else marker and marker.args[0]
        on_other_device = device is not None and device not in devices
        (dropped if on_other_device else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def control_scale(pytestconfig: pytest.Config) -> Scale:
    """The scale negative controls run at: the CPU one unless the forced backend lacks CPU."""
    if "cpu" in pytestconfig.stash.get(FORCED_DEVICES, ("cpu",)):
        return CPU
    import torch

    if not torch.cuda.is_available():
        pytest.skip(NO_GPU)
    return GPU


@pytest.fixture(scope="session")
def weight_bank() -> WeightBank:
    return WeightBank()


@pytest.fixture(autouse=True)
def _dispatch_log(request: pytest.FixtureRequest):
    from stagebot.kernels import backends

    with backends.record_dispatch() as log:
        request.node.stash[DISPATCH_LOG] = log
        yield


@pytest.fixture(autouse=True)
def _pinned_cute_tactic(request: pytest.FixtureRequest):
    if request.node.get_closest_marker("moe_op") is None:
        yield
        return
    from stagebot.kernels.cute import autotune

    tactic = _case_tactic(request.config, request.node.nodeid)
    with autotune.fixed_tactic(tactic):
        yield
    if any(backend == "cute" for _, backend in request.node.stash.get(DISPATCH_LOG, [])):
        request.node.user_properties.append(("cute_tactic", str(tactic)))


def _case_tactic(config: pytest.Config, nodeid: str):
    """The tactic a dispatched-op case runs with: --cute-tactic, else by its id's hash."""
    return config.stash.get(PINNED_TACTIC, None) or kernel_plan.pinned_tactic(nodeid)


@pytest.fixture(autouse=True)
def _kernel_record(request: pytest.FixtureRequest):
    """Records the case's compile keys for a later cold run (see kernel_manifest)."""
    from stagebot.kernels.cute import compile as cute_compile
    from stagebot.kernels.cute import disk_cache

    folder = disk_cache.default_dir()
    if folder is None:
        yield
        return
    with cute_compile.recording() as keys:
        yield
    if keys:
        try:
            kernel_manifest.write(folder, request.node.nodeid, keys)
        except OSError as error:  # a read-only cache folder: the record is an optimisation
            request.node.warn(pytest.PytestWarning(f"kernel record not written: {error}"))
        _check_plan(request.node, keys)


def _check_plan(item: pytest.Item, keys: set) -> None:
    """Notes the keys the case asked for that the committed plan lacks (see kernel_plan)."""
    config = item.config
    config.stash.setdefault(RECORDED, []).append(item.nodeid)
    try:
        plan = _committed_plan(config)
        planned = set(_planned_keys(item, plan.get(kernel_plan.case_id(item), [])))
        missing = [str(key) for key in sorted(keys - planned, key=str)]
    except Exception as error:  # the plan is an optimisation: a line of the summary says why
        missing = [f"{kernel_plan.PLAN_FILE.name} unreadable: {error!r}"]
    config.stash.setdefault(UNPLANNED, []).extend((item.nodeid, what) for what in missing)


def _committed_plan(config: pytest.Config) -> dict:
    if PLAN not in config.stash:
        config.stash[PLAN] = kernel_plan.load(kernel_plan.PLAN_FILE.read_text(encoding="utf-8"))
    return config.stash[PLAN]


def _sm90_here() -> bool:
    """An sm_90 GPU is visible: the only machine that can store what the warm compiles (the
    kernels' host code needs it), so the only one the committed plan is warmed on."""
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Starts compiling the selected cases' kernels (see the module docstring) beside the
    cases. The warm is an optimisation: whatever goes wrong in it is a warning, never the
    session's end."""
    from stagebot.kernels.cute import disk_cache, warm

    folder = disk_cache.default_dir()
    try:
        jobs = warm.default_jobs()
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    if (
        folder is None
        or jobs == 0
        or session.config.option.collectonly
        or importlib.util.find_spec("cutlass") is None
    ):
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)  # a fresh machine's, for the plan's keys
    except OSError:
        return
    if not os.access(folder, os.W_OK):  # read-only: nothing warmed could be stored
        return
    try:
        items = session.items
        records = kernel_manifest.read(folder, [item.nodeid for item in items])
        plan = _committed_plan(session.config) if _sm90_here() else {}
        keys, planned = {}, 0  # in the order the cases ask for them: the pool's order
        for item in items:
            recorded = records.get(item.nodeid)
            if recorded is None and (recorded := plan.get(kernel_plan.case_id(item))):
                planned += 1
            keys.update(dict.fromkeys(_planned_keys(item, recorded or [])))
        if keys:
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(
                    f"{PREFIX} compiling the {len(keys)} cute kernels recorded for "
                    f"{len(records) + planned} cases ({planned} of them from "
                    f"{kernel_plan.PLAN_FILE.name}) beside the cases, on up to {jobs} processes"
                )
            session.config.stash[WARMING] = _BackgroundWarm(list(keys), folder, jobs)
    except Exception as error:
        _warn_not_warmed(error)


def _warn_not_warmed(error: BaseException) -> None:
    warnings.warn(
        pytest.PytestWarning(f"{PREFIX} cute kernels not warmed: {error!r}"), stacklevel=2
    )


class _BackgroundWarm:
    """stagebot.kernels.cute.warm on a thread of its own: the pool compiles in the order the
    cases ask, while the first cases run (a case that reaches a kernel first compiles it, or
    waits on the entry's lock for the worker building it). The session's end waits for it, so
    every selected case's kernel is stored for the next run."""

    def __init__(self, keys: list, folder, jobs: int) -> None:
        from stagebot.kernels.cute import warm

        self.report, self.error = None, None

        def run() -> None:
            try:
                self.report = warm.warm(keys, folder, jobs)
            except Exception as error:  # reported by finish, on the main thread
                self.error = error

        self.thread = threading.Thread(target=run, name="cute-warm", daemon=True)
        self.thread.start()

    def finish(self):
        """The warm's report once it is done (None after a fault, which is warned about)."""
        self.thread.join()
        if self.error is not None:
            _warn_not_warmed(self.error)
        return self.report


def _planned_keys(item: pytest.Item, recorded: Iterable) -> Iterator:
    """The recorded keys with the tactic the case is pinned to now (the list may have changed
    since the record), where that tactic can take the kernel's problem."""
    if item.get_closest_marker("moe_op") is None:
        yield from recorded
        return
    yield from kernel_plan.with_tactic(recorded, _case_tactic(item.config, item.nodeid))


def _tactic_lines() -> list[str]:
    from stagebot.kernels.cute import autotune
    from stagebot.kernels.cute.tactics import TACTICS

    if not autotune.launched:
        return []
    lines = [
        f"{kernel:<24}{tactic:<36}{count:>7}"
        for (kernel, tactic), count in sorted(autotune.launched.items())
    ]
    kernels = sorted({kernel for kernel, _ in autotune.launched})
    for kernel in kernels:
        never = [str(t) for t in TACTICS if (kernel, str(t)) not in autotune.launched]
        if never:
            lines.append(f"{kernel}: never launched with {', '.join(never)}")
    return lines


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = (yield).get_result()
    from stagebot.kernels.errors import BackendUnavailableError

    if call.excinfo is not None and call.excinfo.errisinstance(BackendUnavailableError):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {call.excinfo.value}")
    marker = item.get_closest_marker("moe_op")
    if marker is None:
        return
    tally, op = item.config.stash[TALLY], marker.args[0]
    if report.skipped and report.when in ("setup", "call"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        tally.add_skipped(item.nodeid, op, reason)
    elif report.when == "call":
        used = {
            backend for logged_op, backend in item.stash.get(DISPATCH_LOG, []) if logged_op == op
        }
        tally.add_ran(item.nodeid, op, used)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if (warming := session.config.stash.get(WARMING, None)) is not None:
        if (report := warming.finish()) is not None:
            session.config.stash[WARMED] = report
    if session.config.stash[TALLY].violations and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if (warmed := config.stash.get(WARMED, None)) is not None:  # whatever the cases were
        terminalreporter.write_line(f"{PREFIX} cute kernels warmed beside the cases: {warmed}")
    if plan_line := _plan_line(config):
        terminalreporter.write_line(plan_line)
    tally = config.stash[TALLY]
    lines = tally.lines()
    if not lines:
        return
    forced = f"forced: {tally.forced}" if tally.forced else "auto"
    terminalreporter.section(f"{PREFIX} cases per op and backend ({forced})")
    for line in lines:
        terminalreporter.write_line(line)
    for violation in tally.violations:
        terminalreporter.write_line(f"{PREFIX} FAIL forced backend: {violation}", red=True)
    tactic_lines = _tactic_lines()
    if tactic_lines:
        terminalreporter.section(f"{PREFIX} cute launches per kernel and pinned tactic")
        for line in tactic_lines:
            terminalreporter.write_line(line)
    if compile_line := _compile_line():
        terminalreporter.write_line(compile_line)


def _plan_line(config: pytest.Config) -> str:
    """How the cases' recorded keys compare with the committed plan."""
    recorded = config.stash.get(RECORDED, [])
    if not recorded:
        return ""
    name = kernel_plan.PLAN_FILE.name
    unplanned = config.stash.get(UNPLANNED, [])
    if not unplanned:
        return f"{PREFIX} cute kernel plan: {len(recorded)} recorded cases, every key in {name}"
    cases = len({nodeid for nodeid, _ in unplanned})
    nodeid, what = unplanned[0]
    return (
        f"{PREFIX} cute kernel plan: {cases} of {len(recorded)} recorded cases asked for "
        f"{len(unplanned)} keys {name} lacks (first: {nodeid}: {what}); "
        f"`{kernel_plan.RECORD_COMMAND}` rewrites it, kernel_plan.GEMMS says what each test calls"
    )


def _compile_line() -> str:
    """Where this process's cute kernels came from: compiled here, or the disk cache."""
    compile_module = sys.modules.get("stagebot.kernels.cute.compile")
    if compile_module is None or not compile_module.stats:
        return ""
    stats = compile_module.stats
    return (
        f"{PREFIX} cute kernels: {stats['compiled']} compiled ({stats['compiled_s']:.1f} s), "
        f"{stats['loaded']} loaded from the disk cache ({stats['loaded_s']:.1f} s)"
    )
