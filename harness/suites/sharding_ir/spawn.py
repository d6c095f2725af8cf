"""Run a function on N ranks, one process each, under a process group; collect results.

NCCL (one GPU per rank) when ``backend == "nccl"``, gloo on CPU otherwise. NCCL ranks start as
fresh interpreters (``spawn``: CUDA is never initialised in a process they fork from); gloo ranks
fork from a forkserver that imported what every rank imports (torch, export's tracer,
transformers, the worker: ``_rank_preload``) once, so a rank starts in a fraction of a second
instead of paying those imports again. Ranks meet through a file store (no port to race for).

Each rank says when it has started (process group formed); the parent measures that start-up and
gives the ranks limits that scale with the slowest start-up it has measured (``SpawnLimits``; the
first spawn's includes the forkserver's imports). It stops every rank once any rank fails or a
limit runs out, and raises ``RankFailure``: its first line says why each rank failed (an
exception, a signal, an exit code), then each failed rank's traceback or stderr follows under
``--- rank N: why ---``, so it reads in the pytest report itself and the failure analysis can tell
a crash from an exception. A limit that runs out raises ``SpawnTimeout`` (a ``RankFailure``) whose
first line says which limit, how long the ranks ran, and the machine's load average: a slow
machine, not a wrong result.

Each rank's stderr goes to a file of its own before its target is unpickled, so a rank that dies
before its target runs (an import error while unpickling the target) is reported with the tail of
what it printed. A rank that returned a result must exit with code 0; one that is merely slow to
exit keeps its result: it is stopped once the exit limit runs out, with a ``SlowExitWarning``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from stagebot.harness.run.own_names import FORKSERVER_FIRST
from stagebot.harness.run.process import load_average
from stagebot.harness.suites.sharding_ir.limits import SpawnLimits

STARTED, RESULT, ERROR = "started", "result", "error"  # what a rank puts on the queue
PRELOAD = "stagebot.harness.suites.sharding_ir._rank_preload"
_slowest_startup_s = 0.0  # in this process: the limits never shrink below what was measured
_STILL_RUNNING = "still running when the limit ran out"
_STOPPED = "stopped after another rank failed"  # listed, not counted: it did not fail itself


class RankFailure(RuntimeError):
    """One or more ranks failed (not an assertion: a rank may have crashed or hung); the message
    says why each failed and holds their tracebacks."""


class SpawnTimeout(RankFailure):
    """The ranks ran out of a limit (to start, or to finish once started); the message says which,
    after how long, and the load average."""


class SlowExitWarning(RuntimeWarning):
    """A rank returned its result but had not exited when the exit limit ran out: it was stopped,
    its result stands."""


@dataclass
class _Deadline:
    """The limit the ranks are under now: start-up's, then the run's once every rank started."""

    phase: str  # "start-up" | "run"
    limit_s: float
    how: str
    since: float  # monotonic time the phase began
    ran_out_after_s: float | None = None  # how long the phase had run when the limit ran out

    @property
    def at(self) -> float:
        return self.since + self.limit_s


def run_on_ranks(
    target: Callable[..., Any],
    world_size: int,
    args: tuple = (),
    *,
    backend: str = "gloo",
    limits: SpawnLimits | None = None,
) -> list[Any]:
    """``[target(rank, *args) for rank in range(world_size)]``, each in its own process."""
    limits = limits or SpawnLimits()
    ctx = _context(backend)
    results: queue.Queue = ctx.Queue()
    pickled_target = pickle.dumps(target)  # unpickled by each rank once its stderr is its log
    with tempfile.TemporaryDirectory(prefix="sharding_ir_") as tmp:
        store = os.path.join(tmp, "store")
        logs = [os.path.join(tmp, f"rank{rank}.stderr") for rank in range(world_size)]
        procs = [
            ctx.Process(
                target=_rank_main,
                args=(
                    pickled_target,
                    rank,
                    world_size,
                    backend,
                    store,
                    limits.collective_s,
                    args,
                    results,
                    logs[rank],
                ),
                name=f"rank{rank}",
            )
            for rank in range(world_size)
        ]
        spawned = time.monotonic()
        for proc in procs:
            proc.start()
        stopped: set[int] = set()
        slow_exits: list[int] = []
        deadline = _Deadline("start-up", limits.start_s, "the start-up limit", spawned)
        try:
            outcomes, deadline = _collect(procs, results, deadline, limits)
            if all(ok for ok, _ in outcomes.values()):
                exit_s, how = limits.exit_limit(_startup_for_limits(deadline.since - spawned))
                exit_by = time.monotonic() + exit_s
                for proc in procs:  # all returned: let them leave on their own
                    proc.join(timeout=max(0.0, exit_by - time.monotonic()))
                slow_exits = [rank for rank, proc in enumerate(procs) if proc.is_alive()]
        finally:
            for rank, proc in enumerate(procs):
                if proc.is_alive():
                    proc.terminate()
                    stopped.add(rank)
            for proc in procs:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
                    proc.join(timeout=10)
        if slow_exits:
            warnings.warn(
                SlowExitWarning(
                    f"rank(s) {', '.join(map(str, slow_exits))} returned a result but did not exit "
                    f"within the exit limit of {_secs(exit_s)} s ({how}); stopped, results kept; "
                    f"{load_average()}"
                ),
                stacklevel=2,
            )
        for rank, proc in enumerate(procs):
            ok, _ = outcomes[rank]
            if ok and rank not in stopped and proc.exitcode != 0:
                outcomes[rank] = (False, f"returned a result but exited with code {proc.exitcode}")
        failures = {
            rank: (
                _why(text, None if rank in stopped else procs[rank].exitcode),
                _body(text) + _stderr_tail(logs[rank]),
            )
            for rank, (ok, text) in sorted(outcomes.items())
            if not ok
        }
    if failures:
        details = "\n".join(
            f"--- rank {rank}: {why} ---\n{text}" for rank, (why, text) in failures.items()
        )
        whys = "; ".join(f"rank {rank}: {why}" for rank, (why, _) in failures.items())
        ran_s = deadline.ran_out_after_s
        if ran_s is not None:
            raise SpawnTimeout(
                f"{world_size} ranks ({backend}) timed out after {_secs(ran_s)} s "
                f"of {deadline.phase} (limit {_secs(deadline.limit_s)} s: {deadline.how}); "
                f"{load_average()}: {whys}\n" + details
            )
        failed = sum(why != _STOPPED for why, _ in failures.values())
        raise RankFailure(f"{failed} of {world_size} ranks failed ({backend}): {whys}\n" + details)
    return [outcomes[rank][1] for rank in range(world_size)]


def _secs(seconds: float) -> str:
    return f"{round(seconds, 2):g}"


def _body(text: str) -> str:
    """A rank's details below its header: the traceback; a one-line reason is in the header."""
    return text if "\n" in text.strip() else ""


def _why(text: str, exitcode: int | None) -> str:
    """One phrase: why a rank failed (its exception, the signal or exit code that ended it).
    ``exitcode``: None for a rank the parent stopped; a signal the rank died of comes first (a
    dying rank can make another fail first, which would otherwise hide its crash)."""
    if text == _STILL_RUNNING:
        return text
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name} (exit code {exitcode})"
    if text.startswith(_STOPPED):
        return _STOPPED
    if text.startswith(("exited with code", "returned a result")):
        return text.splitlines()[0]
    lines = [line for line in text.strip().splitlines() if line and not line.startswith(" ")]
    return f"exception {lines[-1]}" if lines else "failed"


def _context(backend: str):
    if backend == "nccl":
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    # read when the forkserver starts (its first rank); own_names.FORKSERVER_FIRST first
    ctx.set_forkserver_preload([FORKSERVER_FIRST, PRELOAD])
    return ctx


def _stderr_to(path: str) -> None:
    """Point this process's fd 2 (and so ``sys.stderr``) at ``path``."""
    sys.stderr.flush()
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 2)
    os.close(log)


def _startup_for_limits(measured_s: float) -> float:
    """The slowest start-up measured so far in this process: a forked rank starts fast on a
    loaded machine too; the forkserver's imports, in its first start-up, tell the machine's pace."""
    global _slowest_startup_s
    _slowest_startup_s = max(_slowest_startup_s, measured_s)
    return _slowest_startup_s


def _stderr_tail(path: str, lines: int = 25, chars: int = 4000) -> str:
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    tail = "\n".join(text.rstrip().splitlines()[-lines:])[-chars:]
    return f"\n--- its stderr (last {lines} lines) ---\n{tail}" if tail else ""


def _collect(
    procs, results: queue.Queue, deadline: _Deadline, limits: SpawnLimits
) -> tuple[dict[int, tuple[bool, Any]], _Deadline]:
    """Every rank's (ok, result or traceback), and the deadline it ended under (the run's once
    every rank started: its ``since`` is then the end of start-up); stops at the first failure,
    death or the deadline."""
    outcomes: dict[int, tuple[bool, Any]] = {}
    started: set[int] = set()
    while len(outcomes) < len(procs):
        try:
            rank, kind, payload = results.get(timeout=0.5)
        except queue.Empty:
            dead = [r for r, p in enumerate(procs) if r not in outcomes and p.exitcode is not None]
            for rank in dead:
                outcomes[rank] = (False, f"exited with code {procs[rank].exitcode} and no result")
            if dead:
                break
            if _ran_out(deadline, outcomes, len(procs)):
                break
            continue
        if kind == STARTED:
            started.add(rank)
            if _ran_out(deadline, outcomes, len(procs)):  # started, but past the limit
                break
            if len(started) == len(procs):
                now = time.monotonic()
                limit, how = limits.run_limit(_startup_for_limits(now - deadline.since))
                deadline = _Deadline("run", limit, how, now)
            continue
        outcomes[rank] = (kind == RESULT, payload)
        if kind == ERROR:
            break
    for rank in range(len(procs)):
        outcomes.setdefault(rank, (False, _STOPPED))
    return outcomes, deadline


def _ran_out(deadline: _Deadline, outcomes: dict, world_size: int) -> bool:
    """Whether ``deadline`` has passed; if so, every rank without an outcome is still running."""
    now = time.monotonic()
    if now <= deadline.at:
        return False
    deadline.ran_out_after_s = now - deadline.since
    for rank in range(world_size):
        outcomes.setdefault(rank, (False, _STILL_RUNNING))
    return True


def _rank_main(
    pickled_target, rank, world_size, backend, store, collective_timeout_s, args, results, log
) -> None:
    _stderr_to(log)
    target = pickle.loads(pickled_target)  # a failure here ends the rank: its stderr says why
    import torch
    import torch.distributed as dist

    try:
        kwargs = {}
        if backend == "nccl":
            torch.cuda.set_device(rank)
            kwargs["device_id"] = torch.device("cuda", rank)
        else:
            torch.set_num_threads(1)
        dist.init_process_group(
            backend,
            init_method=f"file://{store}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=collective_timeout_s),
            **kwargs,
        )
        # gloo's init may return on one rank while its peer still completes the connection: a
        # rank that then exited at once failed the peer's init ("Connection closed by peer").
        dist.barrier()
        results.put((rank, STARTED, None))
        outcome = (rank, RESULT, target(rank, *args))
    except BaseException:
        outcome = (rank, ERROR, traceback.format_exc())
    # Reported before the teardown: a peer's error that this rank's teardown causes comes later.
    results.put(outcome)
    if dist.is_initialized():
        dist.destroy_process_group()
