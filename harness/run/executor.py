"""Execute a Plan on this host: split, schedule on GPU/CPU slots, run shards, record as they end.

``execute(plan, catalog, pipeline, settings, ledger=...)``: shards the plan reuses become REUSED
results (their passed tests are copied forward in the ledger) — for a multi-shard family only
after the split, when every test of the shard's share passed (the split is pinned per commit and
catalog in the ledger, so it normally is the same); shards this host cannot run (GPU
type, count, nodes) become NOT_RUN with the reason; the rest run concurrently as their slots
allow (``harness.scheduler``), each in its own pytest, and each result is written to the ledger
the moment it ends. Fail-fast (the default): the first shard that ``Settings.condemns`` (`bot run`:
one with a NEW failure; here by default any FAILURE/ERROR) cancels the queue and terminates running
shards (ABORTED, their evidence starting with ``FAIL_FAST``). Ctrl-C / SIGTERM cancels everything
(the pipeline ABORTED).
"""

from __future__ import annotations

import concurrent.futures
import shlex
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from stagebot.harness.ledger.store import retry_busy
from stagebot.harness.results import FAIL_FAST, StageResult, fail_fast_evidence
from stagebot.harness.reuse.offers import offer, read_keys, with_refusals
from stagebot.harness.run.collect import CollectError
from stagebot.harness.run.gpus import Device, describe, detect_devices, gpu_types_of
from stagebot.harness.run.placement import family_split, is_split, missing_hardware
from stagebot.harness.run.progress import Expected, Progress
from stagebot.harness.run.recording import (
    Passed,
    logs_of,
    passed_tests,
    record_result,
    reused_result,
)
from stagebot.harness.run.scheduler import CPU, Job, Running, Scheduler
from stagebot.harness.run.shard import (
    ShardContext,
    not_run_result,
    pytest_argv,
    run_shard,
    shard_timeout_s,
    write_result,
)
from stagebot.stages.catalog import Catalog
from stagebot.stages.matrix import matrix_entries
from stagebot.stages.plan import MatrixEntry, Plan

DEFAULT_EXPECTED_S = 60.0
STOPPED = "cancelled: the run was stopped (Ctrl-C / SIGTERM)"
FAILED_STATES = ("FAILURE", "ERROR")


def failed_state(result: StageResult) -> str | None:
    """Why ``result`` condemns the pipeline when nothing finer is known: it FAILED or ERRORed."""
    return f"{result.stage} ended {result.state}" if result.state in FAILED_STATES else None


@dataclass
class Settings:
    out_dir: Path
    root: Path
    cpu_slots: int = 1
    fail_fast: bool = True
    detailed_log: bool = False
    debug: bool = False
    shard_timeout_s: float | None = None  # every shard's timeout instead of the catalog's
    devices: list[Device] | None = None  # None: detect this host's GPUs
    default_branch: str = "main"  # whose post-merge pipelines reuse by key trusts
    # a shard's end -> why it condemns the pipeline (fail-fast), or None; called for every
    # shard that ran, fail-fast or not (`bot run` says its NEW failures there)
    condemns: Callable[[StageResult], str | None] = failed_state


@dataclass
class Execution:
    results: list[StageResult] = field(default_factory=list)
    cancelled: bool = False
    slots: dict[str, list[str]] = field(default_factory=dict)  # stage -> slots it ran on
    host: str = ""


def execute(
    plan: Plan,
    catalog: Catalog,
    pipeline: int,
    settings: Settings,
    *,
    ledger=None,
    progress: Progress | None = None,
) -> Execution:
    progress = progress or Progress()
    devices = detect_devices() if settings.devices is None else settings.devices
    gpus = {device.id: gpu_types_of(device, catalog.gpu_types) for device in devices}
    scheduler = Scheduler.with_cpu_slots(gpus, settings.cpu_slots)
    execution = Execution(host=f"{describe(devices)}, {settings.cpu_slots} CPU slot(s)")
    progress.line(f"pipeline #{pipeline}: {execution.host}")

    partly_reused: dict[str, Passed] = {}

    def record(result: StageResult, reused=None) -> None:
        reused = partly_reused.get(result.stage) if reused is None else reused
        keyed = (  # a REUSED shard's folder is not its own: it did not run here
            read_keys(
                settings.out_dir / result.stage,
                result.stage,
                ledger,
                pipeline,
                settings.default_branch,
            )
            if ledger is not None and result.state != "REUSED"
            else None
        )
        result = with_refusals(result, keyed)
        execution.results.append(result)
        if ledger is not None:
            logs = logs_of(result)
            record_result(ledger, pipeline, result, logs=logs, reused=reused, keyed=keyed)
        progress.finished(result)

    cache: dict[str, dict[str, float]] = {}

    def durations(family: str) -> dict[str, float]:  # one query per family and run
        if family not in cache:
            cache[family] = ledger.durations(family) if ledger is not None else {}
        return cache[family]

    # A reused shard of a split family is only decided after the split (see _split).
    entries = matrix_entries(plan, catalog, pipeline, actions=("run", "reuse"))
    options = plan.parsed_command().run
    entries = offer(
        entries,
        catalog,
        ledger,
        pipeline,
        default_branch=settings.default_branch,
        enabled=not (options and options.disable_reuse_test),
    )
    reuse = {shard.stage for shard in plan.shards_to("reuse")}
    for entry in entries:
        if entry.stage in reuse and not is_split(entry):
            record(reused_result(entry), passed_tests(ledger, entry.stage, entry.reuse_from))
    entries = [entry for entry in entries if entry.stage not in reuse or is_split(entry)]
    host = describe(devices)

    def cannot_run_here(entry: MatrixEntry) -> str | None:
        stage = catalog.stage(entry.stage)
        kind = CPU if entry.gpu_count == 0 else entry.gpu_type
        nodes = getattr(stage, "nodes", 1) if stage else 1
        return missing_hardware(entry, scheduler.capacity(kind), host, nodes)

    runnable = []
    for entry in entries:  # before the split: a shard that cannot run here costs no collection
        missing = cannot_run_here(entry)
        if missing and entry.stage not in reuse:
            record(not_run_result(entry, settings.out_dir / entry.stage, "NOT_RUN", missing))
        else:
            runnable.append(entry)
    jobs: dict[str, tuple[Job, MatrixEntry]] = {}
    recorded: dict[str, float | None] = {}  # stage -> seconds its complete runs took
    shares = _split(
        runnable, reuse, plan, pipeline, settings, ledger, durations, record, partly_reused
    )
    for entry in shares:
        out = settings.out_dir / entry.stage
        missing = cannot_run_here(entry)
        if missing:
            record(not_run_result(entry, out, "NOT_RUN", missing))
            continue
        if entry.stage not in partly_reused:
            partly_reused[entry.stage] = (
                passed_tests(ledger, entry.stage, entry.reuse_from) if entry.reused_tests else {}
            )
        recorded[entry.stage] = _recorded_s(entry, ledger, durations)
        expected = recorded[entry.stage] or DEFAULT_EXPECTED_S  # the scheduler needs a guess
        jobs[entry.stage] = (
            Job(entry.stage, entry.gpu_type, max(entry.gpu_count, 1), expected),
            entry,
        )
    progress.plan(
        {
            stage: Expected(_expected_tests(entry, durations), recorded[stage])
            for stage, (job, entry) in jobs.items()
        },
        parallel=len(scheduler.devices),
    )
    _run_jobs(jobs, scheduler, settings, ledger, progress, execution, record)
    return execution


def _run_jobs(jobs, scheduler, settings, ledger, progress, execution, record) -> None:
    queue = [job for job, _ in jobs.values()]
    running: dict[concurrent.futures.Future, tuple[Running, threading.Event]] = {}
    stop = threading.Event()
    stop_reason = ""
    previous = _install_sigterm(stop)
    start = time.monotonic()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(len(scheduler.devices), 1))
    try:
        while queue or running:
            if stop.is_set() and not stop_reason:
                stop_reason = STOPPED
                execution.cancelled = True
            if stop_reason:
                for _, cancel in running.values():
                    cancel.set()
                queue = _abort_queued(queue, jobs, settings, stop_reason, record)
            else:
                now = time.monotonic() - start
                for job, slots in scheduler.pick(queue, [r for r, _ in running.values()], now):
                    queue.remove(job)
                    cancel = threading.Event()
                    entry = jobs[job.key][1]
                    future = pool.submit(_run_one, entry, slots, settings, cancel, progress)
                    running[future] = (Running(job, slots, now + job.expected_s), cancel)
                    execution.slots[job.key] = list(slots)
            if not running:
                if queue and not stop_reason:  # nothing fits and nothing runs: cannot happen
                    stop_reason = "cancelled: no slot can ever take the queued shards"
                continue
            try:
                done, _ = concurrent.futures.wait(
                    running, timeout=0.5, return_when=concurrent.futures.FIRST_COMPLETED
                )
            except KeyboardInterrupt:
                stop.set()
                continue
            progress.tick()
            for future in done:
                running.pop(future)
                result = future.result()
                if result.state == "ABORTED" and stop_reason.startswith(FAIL_FAST):
                    result = replace(result, evidence=stop_reason)  # terminated for it
                    write_result(settings.out_dir / result.stage, result)
                record(result)
                why = settings.condemns(result)
                if why and settings.fail_fast and not stop_reason and (queue or running):
                    stop_reason = fail_fast_evidence(why)
                    progress.line(stop_reason)
    except KeyboardInterrupt:
        stop.set()
        execution.cancelled = True
        for _, cancel in running.values():
            cancel.set()
        for future in list(running):
            record(future.result())
        _abort_queued(queue, jobs, settings, STOPPED, record)
    except BaseException:
        # e.g. the ledger stayed locked: stop the running shards rather than wait for them.
        for _, cancel in running.values():
            cancel.set()
        raise
    finally:
        pool.shutdown(wait=True)
        _restore_sigterm(previous)


def _abort_queued(queue, jobs, settings: Settings, why: str, record) -> list:
    """Record every queued shard ABORTED (``why``); the queue is then empty."""
    for job in queue:
        record(not_run_result(jobs[job.key][1], settings.out_dir / job.key, "ABORTED", why))
    return []


def _run_one(entry, slots, settings: Settings, cancel, progress: Progress) -> StageResult:
    out = settings.out_dir / entry.stage
    devices = tuple(slot for slot in slots if not slot.startswith("cpu:"))
    progress.started(entry.stage, slots, out / "tests.jsonl")
    echo = (
        (lambda line: progress.line(f"{entry.stage} | {line}")) if settings.detailed_log else None
    )
    context = ShardContext(
        out_dir=out,
        root=settings.root,
        devices=devices,
        timeout_s=shard_timeout_s(entry, settings.shard_timeout_s),
        cancel=cancel,
        echo=echo,
        keep_work=settings.debug,
    )
    try:
        result = run_shard(entry, context)
    except Exception as error:  # noqa: BLE001 - a shard's crash must not sink the pipeline
        result = not_run_result(entry, out, "ERROR", f"crashed: the executor failed: {error!r}")
    if settings.debug:
        progress.line(debug_hint(entry, context))
    return result


def debug_hint(entry: MatrixEntry, context: ShardContext) -> str:
    """--debug: where the shard's files are and the exact command that re-runs it."""
    work = context.out_dir / "work"
    if entry.command is not None:
        argv = ["bash", "-c", entry.command]
    else:
        argv = pytest_argv(entry, "python3")[0]
        if entry.tests:
            argv.append(f"--stagebot-select={context.out_dir / 'raw' / 'select-1.txt'}")
    env = f"CUDA_VISIBLE_DEVICES={','.join(context.devices)} STAGEBOT_WORK={work}"
    return (
        f"debug: {entry.stage}'s folder (work, log, streams) is kept at {context.out_dir}; "
        f"re-run it with: cd {context.root} && {env} {shlex.join(argv)}"
    )


def _split(
    entries: list[MatrixEntry],
    reuse: set[str],
    plan: Plan,
    pipeline: int,
    settings: Settings,
    ledger,
    durations,
    record,
    carried: dict[str, Passed],
) -> list[MatrixEntry]:
    """Give each shard of a multi-shard family its share of the family's tests.

    The split is pinned per commit and catalog: a later pipeline on the same commit reuses the
    split the earlier one recorded, so a shard name keeps meaning the same tests. Reuse is checked
    against the share all the same: a shard the plan reuses is REUSED only when every test of its
    share passed in its source pipeline, else it runs the tests that did not; a shard that runs
    skips only the planner's reused tests that are in its share (``carried`` gets them)."""
    families: dict[str, list[MatrixEntry]] = {}
    out = []
    for entry in entries:
        if is_split(entry):
            families.setdefault(entry.stage.rsplit("-", 1)[0], []).append(entry)
        else:
            out.append(entry)
    for family, members in families.items():
        all_reused = all(entry.stage in reuse for entry in members)
        groups = _family_split(
            family, members[0], all_reused, plan, pipeline, settings, ledger, durations
        )
        for entry in members:
            folder = settings.out_dir / entry.stage
            if isinstance(groups, CollectError):
                record(not_run_result(entry, folder, "ERROR", str(groups)))
                continue
            share = groups[entry.shard - 1]
            passed = passed_tests(ledger, entry.stage, entry.reuse_from)
            allowed = passed if entry.stage in reuse else set(entry.reused_tests)
            kept = {t: passed[t] for t in share if t in passed and t in allowed}
            if not share:
                why = f"this shard's share of {family} is empty ({len(groups)} shards, fewer tests)"
                record(not_run_result(entry, folder, "NOT_RUN", why))
            elif len(kept) == len(share):
                record(reused_result(entry), kept)
            else:
                carried[entry.stage] = kept
                out.append(replace(entry, tests=share, reused_tests=list(kept)))
    return out


def _family_split(
    family: str,
    entry: MatrixEntry,
    all_reused: bool,
    plan: Plan,
    pipeline: int,
    settings: Settings,
    ledger,
    durations,
) -> list[list[str]] | CollectError:
    pinned = (
        ledger.pinned_split(family, plan.commit, plan.catalog_digest, entry.shards)
        if ledger is not None
        else None
    )
    if pinned is not None and all_reused:
        groups = pinned  # nothing runs: no need to collect the tests again
    else:
        try:
            groups = family_split(entry, settings.root, durations(family), pinned)
        except CollectError as error:
            return error
    if ledger is not None:
        retry_busy(lambda: ledger.record_split(pipeline, family, groups))
    return groups


def _recorded_s(entry: MatrixEntry, ledger, durations) -> float | None:
    """What the ledger's complete runs say the shard takes; None: no history."""
    if ledger is None:
        return None
    if entry.tests:
        recorded = durations(entry.stage.rsplit("-", 1)[0])
        known = [recorded[t] for t in entry.tests if t in recorded]
        if known:
            return sum(known) * len(entry.tests) / len(known)
    return ledger.shard_duration(entry.stage)


def _expected_tests(entry: MatrixEntry, durations) -> int | None:
    """How many tests the shard will run: its share when split, else as many as the ledger
    recorded for its family (None: never recorded), less the reused ones."""
    if entry.command is not None:
        return 0
    known = entry.tests or list(durations(entry.stage.rsplit("-", 1)[0]))
    if not known:
        return None
    return len(set(known) - set(entry.reused_tests))


def _install_sigterm(stop: threading.Event):
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, lambda *_: stop.set())


def _restore_sigterm(previous) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
