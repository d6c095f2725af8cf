"""Run one stage shard from its matrix entry and write its folder; returns the StageResult.

The folder holds ``result.json`` (StageResult), ``junit.xml`` (the final outcomes, reruns folded
in), ``tests.jsonl`` (the live per-test stream of the first attempt; reruns stream to
``rerun-<n>.jsonl``) and ``log.txt`` (every process's output). A test shard runs one pytest per
combinable suite group, pinned to its devices (``CUDA_VISIBLE_DEVICES``), with ``STAGEBOT_WORK``
pointing at a scratch folder; a build/sanity shard runs its command under ``bash -c``.

States: cancelled -> ABORTED; timeout, a signal, a crash, an internal/usage error or a corrupt
JUnit/JSONL -> ERROR with that evidence; a failed test, or a collected one that never started (the
session ended before it: ``never ran: …``, never re-run) -> FAILURE (a file that fails to import is
a failed item named by its path; pytest exiting 1 with no failed test -> a failed item
``(pytest session)`` with the suite's own line: its verdict); 0 executed tests -> NOT_RUN; else
SUCCESS. Failed tests are re-run (the entry's ``max_reruns`` times, only when at most
``rerun_max_failures`` failed: the catalog family's policy); one that then passes alone is re-run
once more after the tests that ran before it in its process: passing there too it is ``flaky``,
failing there it stays failed, its evidence opening with ``order-dependent:`` and naming the
earliest of those tests after which it fails (bisected: the test that left the fault) and the
nearest ones. The test during which a SIGKILL or the shard's timeout ended pytest is re-run alone
(after the timeout, with twice the time it had had: ``hang_rerun_limit``); its evidence then
ends with what that showed (killed or hung again, or passed).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from stagebot.harness.analysis.causes import (
    environment_cause,
    error_evidence,
    read_tail,
    unusable_interpreter,
)
from stagebot.harness.analysis.evidence import (
    NEVER_RAN,
    log_error_line,
    never_ran_evidence,
    test_evidence,
)
from stagebot.harness.results import SESSION_ID, StageResult, TestOutcome
from stagebot.harness.run import own_names
from stagebot.harness.run.junit import JunitError, read_junit, write_junit
from stagebot.harness.run.process import Finished, load_average, run_process
from stagebot.harness.run.streams import Stream, read_stream
from stagebot.stages import builtin
from stagebot.stages.plan import MatrixEntry

EXECUTED = ("passed", "failed", "error", "flaky", "xfailed")
ORDER_SUSPECTS = 2  # earlier tests named as suspects of an order-dependent failure
BLAME_PROBES = 6  # pytest runs that bisect for the earlier test to blame (64 earlier tests)
# pytest-timeout's thread method: the banner around its stack dump, then os._exit(1).
_THREAD_TIMEOUT = re.compile(r"^\++ [Tt]imeout \++$")
PYTEST_EXIT = {2: "interrupted", 3: "an internal error", 4: "a usage error"}
# The lone re-run of the test a shard's timeout killed: twice the time the test had, plus
# pytest's start-up and collection; not re-run when that is over HANG_RERUN_CAP_S.
HANG_RERUN_FACTOR = 2
HANG_RERUN_START_S = 10.0
HANG_RERUN_CAP_S = 600.0


def shard_timeout_s(entry: MatrixEntry, override_s: float | None = None) -> float:
    """The shard's timeout: ``override_s`` when given (``--shard-timeout``: higher or lower than
    the catalog's, as this machine needs), else the catalog's ``timeout_minutes``."""
    return override_s if override_s else entry.timeout_minutes * 60.0


@dataclass
class ShardContext:
    """Where and how a shard runs (the entry says what)."""

    out_dir: Path
    root: Path  # repository root: the working directory, suite paths are relative to it
    devices: tuple[str, ...] = ()  # GPU ids to pin; empty for CPU shards
    timeout_s: float | None = None  # None: the entry's timeout_minutes
    cancel: threading.Event = field(default_factory=threading.Event)
    echo: Callable[[str], None] | None = None  # stream the log (--detailed-log)
    python: str = sys.executable
    keep_work: bool = False  # --debug: keep the scratch folder


@dataclass
class _Attempt:
    stream: Stream
    finished: Finished
    junit_problem: str | None
    junit_cases: list | None
    log_path: Path | None = None
    start_error: str | None = None  # the interpreter could not be started


# What a shard run writes into its folder; an earlier run's copies are removed first, so a
# reused --out folder never lends its stale results to this run (the plugin appends to streams).
SHARD_OUTPUTS = ("tests.jsonl", "log.txt", "junit.xml", "result.json", "waives.json", "keys.json")
SEAL = ".stagebot-seal"  # written before the tests run, checked after: was the folder tampered?


def clear_shard_folder(out: Path) -> None:
    """Remove an earlier run's outputs from the shard folder ``out`` (and create it)."""
    out.mkdir(parents=True, exist_ok=True)
    for path in [*(out / n for n in (*SHARD_OUTPUTS, SEAL)), *out.glob("rerun-*.jsonl")]:
        path.unlink(missing_ok=True)
    for folder in ("raw", "work", "observed"):
        shutil.rmtree(out / folder, ignore_errors=True)


def run_shard(entry: MatrixEntry, context: ShardContext) -> StageResult:
    out = context.out_dir
    clear_shard_folder(out)
    work = out / "work"
    work.mkdir(exist_ok=True)
    timeout_s = context.timeout_s or entry.timeout_minutes * 60
    started = _now()
    clock = time.monotonic()
    deadline = clock + timeout_s
    env = {
        **own_names.child_environment(dict(os.environ)),
        "STAGEBOT_WORK": str(work),
        "STAGEBOT_STAGE": entry.stage,
        "CUDA_VISIBLE_DEVICES": ",".join(context.devices),
        "PYTHONUNBUFFERED": "1",
    }
    from stagebot.harness.reuse.offers import runner_environment

    keys = _key_check(entry, context)
    environment = (
        keys.environment
        if keys is not None
        else runner_environment(entry.gpu_type, entry.gpu_count)
    )
    if entry.command is not None:
        tests, state, evidence = _run_command(entry, context, env, deadline, timeout_s)
    else:
        run = keys.deselected(entry) if keys is not None else entry
        if keys is not None:
            keys.read_ahead(run)
        tests, state, evidence = _run_tests(run, context, env, deadline, timeout_s)
        if state == "NOT_RUN" and keys is not None and keys.reused:
            # nothing left to execute (or only skips): the shard's tests passed, by key
            state, evidence = "SUCCESS", f"{len(keys.reused)} test(s) reused by key, none failed"
    out.mkdir(parents=True, exist_ok=True)  # the code under test may have removed it
    write_junit(out / "junit.xml", entry.stage, tests)
    (out / "tests.jsonl").touch()
    if not context.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    result = StageResult(
        stage=entry.stage,
        shard=entry.shard,
        shards=entry.shards,
        state=state,
        started_at=started,
        finished_at=_now(),
        duration_s=round(time.monotonic() - clock, 3),
        gpu_type=entry.gpu_type,
        gpus=list(context.devices),
        tests=tests,
        log_path=str(out / "log.txt"),
        evidence=evidence,
        reused_from=entry.reuse_from if entry.reused_tests else None,
        environment=environment.lines(),
    )
    if keys is not None:
        _write_keys(keys, out, [t.test_id for t in tests])
    write_result(out, result)
    return result


def _key_check(entry: MatrixEntry, context: ShardContext):
    """Reuse by dependency key (harness/reuse/offers.py): the tests this shard need not run, written
    to ``keys.json`` at once (None: no key for this shard, or the keys could not be computed,
    which costs reuse, never a result)."""
    from stagebot.harness.reuse.offers import KeyCheck

    try:
        check = KeyCheck.before(entry, context.root)
        if check is not None:
            check.write(context.out_dir)
            for note in [*check.notes, f"{len(check.reused)} test(s) reused by key, deselected"]:
                _note(context.out_dir, note)
        return check
    except Exception as error:  # noqa: BLE001 - a key that cannot be computed reuses nothing
        _note(context.out_dir, f"reuse by key is off for this shard: {error!r}")
        return None


def _write_keys(check, out: Path, finished: list[str]) -> None:
    """The keys of the tests that reached an outcome; on a failure, the reuse alone stays."""
    try:
        check.write(out, finished)
    except Exception as error:  # noqa: BLE001 - no keys recorded: later runs re-run them
        _note(out, f"the dependency keys of this shard were not recorded: {error!r}")


def _note(out: Path, text: str) -> None:
    with open(out / "log.txt", "a", encoding="utf-8") as log:
        log.write(f"stagebot: {text}\n")


def write_result(out: Path, result: StageResult) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(
        json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8"
    )


def placeholder_result(
    entry, state: str, evidence: str, reused_from: int | None = None
) -> StageResult:
    """The StageResult of a shard that did not run here (``entry``: a MatrixEntry or a
    PlannedShard): NOT_RUN, ABORTED, ERROR before starting, or REUSED."""
    return StageResult(
        stage=entry.stage,
        shard=entry.shard,
        shards=entry.shards,
        state=state,
        started_at=None,
        finished_at=None,
        duration_s=0.0,
        gpu_type=entry.gpu_type,
        gpus=[],
        evidence=evidence,
        reused_from=reused_from,
    )


def not_run_result(entry: MatrixEntry, out: Path | None, state: str, evidence: str) -> StageResult:
    """A shard that never started (NOT_RUN for missing hardware, ABORTED when cancelled)."""
    result = placeholder_result(entry, state, evidence)
    if out is not None:
        clear_shard_folder(out)
        (out / "tests.jsonl").touch()
        (out / "log.txt").write_text(f"{state}: {evidence}\n", encoding="utf-8")
        write_junit(out / "junit.xml", entry.stage, [])
        result = StageResult(**{**result.__dict__, "log_path": str(out / "log.txt")})
        write_result(out, result)
    return result


def pytest_argv(entry: MatrixEntry, python: str) -> list[list[str]]:
    """One pytest command line per group of suites that can share a session."""
    own = ("marks", "keyword", "builtin")  # a suite with any of them has a session of its own
    plain = [s for s in entry.suites if not any(s.get(key) for key in own)]
    groups = ([plain] if plain else []) + [[s] for s in entry.suites if s not in plain]
    commands = []
    for group in groups:
        # A file that fails to import fails its own tests, not the whole session's.
        argv = [python, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        argv.append("--continue-on-collection-errors")
        argv += ["-p", "stagebot.harness.run.pytest_plugin"]  # named: it has no entry point
        for suite in group:
            if suite.get("builtin"):  # stagebot's own suite, its ids as stagebot's pipelines'
                where = builtin.installed(suite["path"])
                argv += ["--rootdir", str(builtin.PACKAGE_ROOT), str(where)]
            else:
                argv.append(suite["path"])
            if suite.get("marks"):
                argv += ["-m", suite["marks"]]
            if suite.get("keyword"):
                argv += ["-k", suite["keyword"]]
            argv += list(suite.get("args") or [])
        commands.append(argv)
    return commands


def _run_tests(entry, context, env, deadline, timeout_s):
    out = context.out_dir
    (out / "waives.json").write_text(json.dumps(entry.waives), encoding="utf-8")
    seal = secrets.token_hex(8)
    (out / SEAL).write_text(seal, encoding="utf-8")
    select = list(entry.tests)
    first = _attempt(entry, context, env, deadline, out / "tests.jsonl", "1", select)
    problem = _tampered(out, seal) or _problem(first, timeout_s)
    tests = _outcomes(first, timeout_s)
    if first.finished.cancelled:
        return tests, "ABORTED", "cancelled: another shard failed (fail-fast) or the run stopped"
    if problem is None:
        tests = _reruns(entry, context, env, deadline, tests, first.stream.started)
    elif first.stream.unfinished and (
        first.finished.timed_out or first.finished.signal_name == "SIGKILL"
    ):
        tests = _rerun_alone(entry, context, env, deadline, tests, first)
    if problem is None and _silent_exit_1(tests, first):
        tests.append(_session_failure(first))
    state = _state(tests, problem)
    evidence = _shard_evidence(tests, problem, first)
    if state == "ERROR" and first.start_error is None:
        tail = _log_tail(first)
        cause = environment_cause(tail, context.python, context.root) if _never_ran(first) else None
        evidence = error_evidence(evidence, tail, cause)
    return tests, state, evidence


def _tampered(out: Path, seal: str) -> str | None:
    """Why the shard's folder cannot be trusted: the seal written before the tests ran is gone
    or changed (the code under test removed or rewrote the folder), or None."""
    try:
        intact = (out / SEAL).read_text(encoding="utf-8") == seal
    except OSError:
        intact = False
    if intact:
        return None
    return (
        f"tampered: the shard's output folder {out} was removed or rewritten while its tests "
        "ran (by the code under test); its stream and log are incomplete: keep --out outside "
        "the repository"
    )


def _never_ran(attempt: _Attempt) -> bool:
    """pytest ended by itself before any test ran: its start-up or collection failed."""
    finished = attempt.finished
    abnormal = finished.timed_out or finished.cancelled or finished.signal_name
    ran = [r for r in attempt.stream.results.values() if r.get("phase") != "collect"]
    return not abnormal and not ran


def _attempt(entry, context, env, deadline, stream_path, tag, select) -> _Attempt:
    out = context.out_dir
    argv_groups = pytest_argv(entry, context.python)
    finished = Finished(0, False, False, 0.0)
    junit_cases, junit_problem = [], None
    for index, argv in enumerate(argv_groups, start=1):
        junit = out / "raw" / f"junit-{tag}-{index}.xml"
        junit.parent.mkdir(exist_ok=True)
        argv = [*argv, f"--junitxml={junit}", f"--stagebot-jsonl={stream_path}"]
        argv.append(f"--stagebot-waives={out / 'waives.json'}")
        if entry.key_reuse:  # what the tests open and import joins their dependency keys
            argv.append(f"--stagebot-observe={out / 'observed'}")
        if select:
            ids = out / "raw" / f"select-{tag}.txt"
            ids.write_text("\n".join(select) + "\n", encoding="utf-8")
            argv.append(f"--stagebot-select={ids}")
        if entry.reused_tests:
            ids = out / "raw" / "deselect.txt"
            ids.write_text("\n".join(entry.reused_tests) + "\n", encoding="utf-8")
            argv.append(f"--stagebot-deselect={ids}")
        try:
            finished = run_process(
                argv,
                cwd=context.root,
                env=env,
                log_path=out / "log.txt",
                deadline=deadline,
                cancel=context.cancel,
                echo=context.echo,
            )
        except OSError as error:
            problem = unusable_interpreter(context.python, error)
            return _Attempt(Stream(), finished, None, [], out / "log.txt", problem)
        abnormal = finished.timed_out or finished.cancelled or (finished.returncode or 0) < 0
        if not abnormal and finished.returncode in (0, 1, 5):
            try:
                cases = read_junit(junit)
                if cases is None:
                    junit_problem = f"pytest exited {finished.returncode} but wrote no JUnit file"
                else:
                    junit_cases += cases
            except JunitError as error:
                junit_problem = str(error)
        if abnormal or finished.returncode not in (0, 1, 5):
            break
    return _Attempt(read_stream(stream_path), finished, junit_problem, junit_cases, out / "log.txt")


def _problem(attempt: _Attempt, timeout_s: float) -> str | None:
    """Why the attempt as a whole is an infrastructure error, or None."""
    stream, finished = attempt.stream, attempt.finished
    if attempt.start_error:
        return attempt.start_error
    running = stream.unfinished[-1] if stream.unfinished else None
    where = f" while running {running}" if running else ""
    if finished.cancelled:
        return None
    if finished.timed_out:
        return f"timeout: killed after {timeout_s:g} s, {load_average()}" + (
            where or " (no test had started)"
        )
    if finished.signal_name:
        before = "" if stream.exists and stream.results else " before writing any result"
        return f"crashed: pytest killed by {finished.signal_name}{where}{before}"
    if finished.returncode in PYTEST_EXIT:
        line = log_error_line(_log_tail(attempt))
        return (
            f"pytest ended with {PYTEST_EXIT[finished.returncode]} (exit {finished.returncode})"
            + (f": {line}" if line else "")
        )
    if finished.returncode not in (0, 1, 5):
        line = log_error_line(_log_tail(attempt))
        return f"crashed: pytest exited {finished.returncode}{where}" + (
            f": {line}" if line else ""
        )
    if not stream.exists:
        return "crashed: pytest wrote no test stream (tests.jsonl missing)"
    if stream.problem:
        return f"corrupt output: {stream.problem}"
    if stream.session_end is None:  # then no JUnit file either: the crash is the cause
        return f"crashed: the pytest session did not finish{where}"
    if attempt.junit_problem:
        return f"corrupt output: {attempt.junit_problem}"
    return None


def _log_tail(attempt: _Attempt) -> str:
    return read_tail(attempt.log_path)


def _outcomes(attempt: _Attempt, timeout_s: float) -> list[TestOutcome]:
    stream, finished = attempt.stream, attempt.finished
    tests = [_outcome(record) for record in stream.results.values()]
    # JUnit fills in what the stream lacks (a damaged line, or no stream at all).
    junit = {c.test_id: c for c in attempt.junit_cases or []}
    for test_id in [*stream.unfinished, *(t for t in junit if t not in stream.started)]:
        case = junit.pop(test_id, None)
        if case is not None and test_id not in stream.results:
            tests.append(TestOutcome(test_id, case.outcome, case.duration_s, case.message))
    recovered = {t.test_id for t in tests}
    for test_id in (t for t in stream.unfinished if t not in recovered):
        if finished.timed_out:
            why = (
                f"timeout: still running when the shard was killed after {timeout_s:g} s, "
                + load_average()
            )
        elif finished.cancelled:
            continue
        elif finished.signal_name:
            why = f"crashed: the worker was killed by {finished.signal_name} during this test"
        elif finished.returncode == 1 and _ended_by_thread_timeout(attempt):
            why = "timeout: pytest-timeout (thread method) ended pytest during this test"
        else:
            why = f"crashed: pytest exited {finished.returncode} during this test"
        tests.append(TestOutcome(test_id, "error", 0.0, why))
    if not finished.cancelled:  # every collected test ends with a result
        during = stream.unfinished[-1] if stream.unfinished else None
        status = stream.session_end if stream.session_end is not None else finished.returncode
        why = never_ran_evidence(during, status)
        recovered = {t.test_id for t in tests}
        tests += [
            TestOutcome(t, "error", 0.0, why) for t in stream.never_started if t not in recovered
        ]
    return tests


def _ended_by_thread_timeout(attempt: _Attempt) -> bool:
    """pytest's output ends with pytest-timeout's banner: its thread method dumped the stacks
    and ended the process (exit 1) in the middle of the test."""
    lines = [line.strip() for line in _log_tail(attempt).splitlines() if line.strip()]
    return bool(lines) and _THREAD_TIMEOUT.match(lines[-1]) is not None


def _outcome(record: dict) -> TestOutcome:
    outcome = record["outcome"]
    if outcome in ("failed", "error"):
        log = record.get("log") or ""
        first = next((line.strip() for line in log.splitlines() if line.strip()), None)
        # no error line: pytest's own words (such as "[XPASS(strict)] reason") say it
        evidence = test_evidence(log) or first or f"{outcome} in {record.get('phase')}"
    elif outcome in ("skipped", "waived", "xfailed"):
        evidence = record.get("log") or None
    else:
        evidence = None
    return TestOutcome(record["test_id"], outcome, float(record.get("duration_s", 0.0)), evidence)


def _reruns(
    entry, context, env, deadline, tests: list[TestOutcome], order: list[str]
) -> list[TestOutcome]:
    """Re-run the failed tests alone; one that passes alone is re-run once more after the tests
    that ran before it in its process (``order``: the first attempt's start order): failing
    there, it is order-dependent (an earlier test leaks state into it), not flaky."""
    failed = [
        t.test_id
        for t in tests
        if t.outcome in ("failed", "error")
        and "::" in t.test_id
        and not (t.evidence or "").startswith(NEVER_RAN)  # what ended the session is re-run
    ]
    if not failed or len(failed) > entry.rerun_max_failures:
        return tests
    by_id = {t.test_id: t for t in tests}
    remaining = list(failed)
    for number in range(1, entry.max_reruns + 1):
        if not remaining or time.monotonic() >= deadline or context.cancel.is_set():
            break
        path = context.out_dir / f"rerun-{number}.jsonl"
        attempt = _attempt(entry, context, env, deadline, path, f"rerun-{number}", remaining)
        passed = [
            test_id
            for test_id in remaining
            if (attempt.stream.results.get(test_id) or {}).get("outcome") == "passed"
        ]
        in_order = _order_check(entry, context, env, deadline, passed, order, number)
        still = []
        for test_id in remaining:
            first = by_id[test_id]
            if test_id in in_order:
                by_id[test_id] = TestOutcome(
                    test_id,
                    first.outcome,
                    first.duration_s,
                    f"{in_order[test_id]}: {first.evidence}",
                    attempts=number + 2,
                )
            elif test_id in passed:
                by_id[test_id] = TestOutcome(
                    test_id,
                    "flaky",
                    first.duration_s,
                    f"passed on re-run {number} after: {first.evidence}",
                    attempts=number + 1,
                )
            else:
                by_id[test_id] = TestOutcome(
                    test_id, first.outcome, first.duration_s, first.evidence, attempts=number + 1
                )
                still.append(test_id)
        remaining = still
    return [by_id[t.test_id] for t in tests]


def _rerun_alone(entry, context, env, deadline, tests: list[TestOutcome], first: _Attempt):
    """Re-run alone the test during which the shard was ended from outside: SIGKILLed (within the
    shard's deadline) or out of time (with a longer limit of its own: ``hang_rerun_limit``).
    Ended the same way again, it is its own doing (a memory request the machine cannot meet, a
    hang); passing, it was the machine's (an OOM killer, a one-off stall). Its evidence says
    which, and the analysis reads it (rules.py: runner-killed, shard-timeout, hang-alone)."""
    test_id = first.stream.unfinished[-1]
    hung = first.finished.timed_out
    again = ", and again when re-run alone"
    if hung:
        ran = max(time.time() - first.stream.start_times.get(test_id, time.time()), 0.0)
        limit = hang_rerun_limit(ran)
        if limit is None:
            words = f"; not re-run alone: it had run {ran:.0f} s, over half the re-run's cap"
            return _said_of(tests, test_id, f"{words} ({HANG_RERUN_CAP_S:g} s)", 1)
        deadline = time.monotonic() + limit
        again = f"; it hung again when re-run alone with a limit of {limit:.0f} s"
    if time.monotonic() >= deadline or context.cancel.is_set():
        return tests
    path = context.out_dir / "rerun-alone.jsonl"
    attempt = _attempt(entry, context, env, deadline, path, "rerun-alone", [test_id])
    ended = attempt.finished
    if ended.cancelled:
        return tests
    if ended.timed_out if hung else ended.signal_name == "SIGKILL":
        return _said_of(tests, test_id, again, 2)
    if (attempt.stream.results.get(test_id) or {}).get("outcome") == "passed":
        return _said_of(tests, test_id, "; it passed when re-run alone", 2)
    return tests


def hang_rerun_limit(ran_s: float) -> float | None:
    """The time limit of the lone re-run of a test that was still running when its shard ran out
    of time, after ``ran_s`` seconds of it: twice that, plus pytest's start-up; None when that
    is over HANG_RERUN_CAP_S (what a timed-out shard may cost on top): not re-run, the
    shard's limit stays the machine's."""
    limit = HANG_RERUN_FACTOR * ran_s + HANG_RERUN_START_S
    return limit if limit <= HANG_RERUN_CAP_S else None


def _said_of(tests: list[TestOutcome], test_id: str, words: str, attempts: int):
    """``tests`` with ``words`` appended to ``test_id``'s evidence."""
    return [
        replace(t, evidence=f"{t.evidence}{words}", attempts=attempts)
        if t.test_id == test_id
        else t
        for t in tests
    ]


def _order_check(entry, context, env, deadline, passed: list[str], order: list[str], number: int):
    """Re-run ``passed`` (tests that passed alone) with the tests that ran before them in the
    first attempt, in that order; test id -> its "order-dependent: …" line for each that fails
    again there (the nearest earlier tests named first: the likeliest to leak state)."""
    started = list(dict.fromkeys(order))
    known = [test_id for test_id in passed if test_id in started[1:]]  # something ran before
    if not known or time.monotonic() >= deadline or context.cancel.is_set():
        return {}
    last = max(started.index(test_id) for test_id in known)
    select = started[: last + 1]
    tag = f"rerun-{number}-in-order"
    attempt = _attempt(entry, context, env, deadline, context.out_dir / f"{tag}.jsonl", tag, select)
    found = {}
    for test_id in known:
        record = attempt.stream.results.get(test_id)
        if record is None or record["outcome"] not in ("failed", "error"):
            continue
        before = started[: started.index(test_id)]
        nearest = ", ".join(reversed(before[-ORDER_SUSPECTS:]))
        blame = _first_to_blame(entry, context, env, deadline, before, test_id, number)
        found[test_id] = (
            f"order-dependent: passes alone, fails after the {len(before)} test(s) that ran "
            f"before it in its process ({f'to blame: {blame}; ' if blame else ''}"
            f"nearest first: {nearest})"
        )
    return found


def _first_to_blame(entry, context, env, deadline, before: list[str], test_id: str, number: int):
    """The earliest of ``before`` after which ``test_id`` fails (the test that left the fault,
    such as a device it poisoned), bisected over prefixes of ``before`` (``test_id`` fails
    after all of them and passes alone); None when out of time or probes."""
    good, bad = 0, len(before)  # test_id passes after before[:good], fails after before[:bad]
    for probe in range(BLAME_PROBES):
        if bad - good <= 1:
            return before[bad - 1]
        if time.monotonic() >= deadline or context.cancel.is_set():
            return None
        middle = (good + bad) // 2
        tag = f"rerun-{number}-blame-{probe}"
        select = [*before[:middle], test_id]
        attempt = _attempt(
            entry, context, env, deadline, context.out_dir / f"{tag}.jsonl", tag, select
        )
        outcome = (attempt.stream.results.get(test_id) or {}).get("outcome")
        if outcome in ("failed", "error"):
            bad = middle
        elif outcome == "passed":
            good = middle
        else:
            return None
    return before[bad - 1] if bad - good <= 1 else None


def _state(tests: list[TestOutcome], problem: str | None) -> str:
    """The exit status is read before NOT_RUN: a suite's own verdict (a session failure) fails
    the shard even when every case was skipped."""
    if problem is not None:
        return "ERROR"
    if any(t.outcome in ("failed", "error") for t in tests):
        return "FAILURE"
    if not any(t.outcome in EXECUTED for t in tests):
        return "NOT_RUN"
    return "SUCCESS"


def _session_failure(attempt: _Attempt) -> TestOutcome:
    """The suite's own verdict as a failing item, with the suite's line as evidence."""
    line = _suite_verdict_line(_log_tail(attempt))
    return TestOutcome(
        SESSION_ID, "failed", 0.0, line or "pytest exited 1 but reported no failed test"
    )


def _suite_verdict_line(log: str) -> str | None:
    """The line a suite printed for its verdict: the last FAIL / ERROR line of the session's
    output (pytest's own ``===`` summary lines aside), else the last error-looking line."""
    for line in reversed(log.splitlines()):
        text = line.strip()
        if text and not text.startswith("=") and re.search(r"\b(?:FAIL\w*|ERROR)\b", text):
            return text
    return log_error_line(log)


def _silent_exit_1(tests: list[TestOutcome], attempt: _Attempt) -> bool:
    """pytest said "tests failed" (exit 1) but streamed no failure: something is off."""
    return attempt.finished.returncode == 1 and not any(
        t.outcome in ("failed", "error", "flaky") for t in tests
    )


def _shard_evidence(tests, problem, attempt) -> str | None:
    if problem is not None:
        return problem
    executed = sum(t.outcome in EXECUTED for t in tests)
    if executed == 0:
        if attempt.finished.returncode == 5 or not tests:
            return "0 tests executed: pytest collected no test (check the suite paths and -m/-k)"
        reasons = sorted({t.evidence or t.outcome for t in tests})
        shown = "; ".join(reasons[:3]) + (" …" if len(reasons) > 3 else "")
        return f"0 tests executed: all {len(tests)} skipped ({shown})"
    failed = [t for t in tests if t.outcome in ("failed", "error")]
    if failed:
        return f"{len(failed)} test(s) failed; first: {failed[0].test_id}: {failed[0].evidence}"
    return None


def _run_command(entry, context, env, deadline, timeout_s):
    test_id = f"{entry.stage}::command"
    finished = run_process(
        ["bash", "-c", entry.command],
        cwd=context.root,
        env=env,
        log_path=context.out_dir / "log.txt",
        deadline=deadline,
        cancel=context.cancel,
        echo=context.echo,
    )
    log = read_tail(context.out_dir / "log.txt")
    duration = round(finished.elapsed_s, 3)
    if finished.cancelled:
        return [], "ABORTED", "cancelled: another shard failed (fail-fast) or the run stopped"
    if finished.timed_out:
        why = error_evidence(
            f"timeout: command killed after {timeout_s:g} s, {load_average()}", log
        )
        return [TestOutcome(test_id, "error", duration, why)], "ERROR", why
    if finished.signal_name:
        why = error_evidence(f"crashed: command killed by {finished.signal_name}", log)
        return [TestOutcome(test_id, "error", duration, why)], "ERROR", why
    if finished.returncode != 0:
        line = log_error_line(log.split("\n", 1)[-1]) or "no output"
        why = f"command exited {finished.returncode}: {line}"
        return [TestOutcome(test_id, "failed", duration, why)], "FAILURE", why
    return [TestOutcome(test_id, "passed", duration)], "SUCCESS", None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
