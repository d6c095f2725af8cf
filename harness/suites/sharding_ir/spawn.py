"""Run a function on N ranks, one spawned process each, under a process group; collect results.

NCCL (one GPU per rank) when ``backend == "nccl"``, gloo on CPU otherwise. Ranks meet through a
file store (no port to race for). Collectives time out after ``collective_timeout_s``; the parent
stops every rank once any rank fails or the deadline passes, and raises ``RankFailure``: its first
line says why each rank failed (an exception, a signal, an exit code, the deadline), then each
failed rank's traceback or stderr follows under ``--- rank N: why ---``, so it reads in the pytest
report itself and the failure analysis can tell a crash from a hang from an exception.

Each child's stderr goes to a file of its own from the moment it starts, so a rank that dies
before its target runs (an import error while unpickling the target, a crash in the
interpreter) is reported with the tail of what it printed. A rank that returned a result must
still exit with code 0.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any


class RankFailure(RuntimeError):
    """One or more ranks failed (not an assertion: a rank may have crashed or hung); the message
    says why each failed and holds their tracebacks."""


def run_on_ranks(
    target: Callable[..., Any],
    world_size: int,
    args: tuple = (),
    *,
    backend: str = "gloo",
    timeout_s: float = 300.0,
    collective_timeout_s: float = 90.0,
    exit_grace_s: float = 30.0,
) -> list[Any]:
    """``[target(rank, *args) for rank in range(world_size)]``, each in its own process."""
    ctx = mp.get_context("spawn")
    results: queue.Queue = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="sharding_ir_") as tmp:
        store = os.path.join(tmp, "store")
        procs = [
            ctx.Process(
                target=_rank_main,
                args=(
                    target,
                    rank,
                    world_size,
                    backend,
                    store,
                    collective_timeout_s,
                    args,
                    results,
                ),
                name=f"rank{rank}",
            )
            for rank in range(world_size)
        ]
        logs = [os.path.join(tmp, f"rank{rank}.stderr") for rank in range(world_size)]
        for proc, log in zip(procs, logs, strict=True):
            _start_with_stderr_to(proc, log)
        stopped: set[int] = set()
        try:
            outcomes = _collect(procs, results, time.monotonic() + timeout_s)
            if all(ok for ok, _ in outcomes.values()):
                exit_by = time.monotonic() + exit_grace_s
                for proc in procs:  # all returned: let them leave on their own
                    proc.join(timeout=max(0.0, exit_by - time.monotonic()))
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
        all_ok = all(ok for ok, _ in outcomes.values())
        for rank, proc in enumerate(procs):
            if not outcomes[rank][0]:
                continue
            if rank in stopped:
                if all_ok:  # it had its grace period; else another rank's failure stopped it
                    outcomes[rank] = (
                        False,
                        f"returned a result but did not exit in {exit_grace_s} s",
                    )
            elif proc.exitcode != 0:
                outcomes[rank] = (False, f"returned a result but exited with code {proc.exitcode}")
        failures = {
            rank: (
                _why(text, None if rank in stopped else procs[rank].exitcode, timeout_s),
                _body(text) + _stderr_tail(logs[rank]),
            )
            for rank, (ok, text) in sorted(outcomes.items())
            if not ok
        }
    if failures:
        whys = "; ".join(f"rank {rank}: {why}" for rank, (why, _) in failures.items())
        raise RankFailure(
            f"{len(failures)} of {world_size} ranks failed ({backend}): {whys}\n"
            + "\n".join(
                f"--- rank {rank}: {why} ---\n{text}" for rank, (why, text) in failures.items()
            )
        )
    return [outcomes[rank][1] for rank in range(world_size)]


def _body(text: str) -> str:
    """A rank's details below its header: the traceback; a one-line reason is in the header."""
    return text if "\n" in text.strip() else ""


def _why(text: str, exitcode: int | None, timeout_s: float) -> str:
    """One phrase: why a rank failed (its exception, the signal or exit code that ended it).
    ``exitcode``: None for a rank the parent stopped; a signal the rank died of comes first (a
    dying rank can make another fail first, which would otherwise hide its crash)."""
    if text.startswith("still running at the deadline"):
        return f"still running at the deadline after {timeout_s:g} s"
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name} (exit code {exitcode})"
    if text.startswith("stopped after another rank failed"):
        return "stopped after another rank failed"
    if text.startswith(("exited with code", "returned a result")):
        return text.splitlines()[0]
    lines = [line for line in text.strip().splitlines() if line and not line.startswith(" ")]
    return f"exception {lines[-1]}" if lines else "failed"


def _start_with_stderr_to(proc, path: str) -> None:
    """Start ``proc`` with its fd 2 on ``path``: the spawned interpreter inherits it from birth."""
    sys.stderr.flush()
    saved = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.dup2(log, 2)
        proc.start()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)


def _stderr_tail(path: str, lines: int = 25, chars: int = 4000) -> str:
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    tail = "\n".join(text.rstrip().splitlines()[-lines:])[-chars:]
    return f"\n--- its stderr (last {lines} lines) ---\n{tail}" if tail else ""


def _collect(procs, results: queue.Queue, deadline: float) -> dict[int, tuple[bool, Any]]:
    """Every rank's (ok, result or traceback); stops at the first failure, death or the deadline."""
    outcomes: dict[int, tuple[bool, Any]] = {}
    while len(outcomes) < len(procs):
        try:
            rank, ok, payload = results.get(timeout=0.5)
            outcomes[rank] = (ok, payload)
            if not ok:
                break
        except queue.Empty:
            dead = [r for r, p in enumerate(procs) if r not in outcomes and p.exitcode is not None]
            for rank in dead:
                outcomes[rank] = (False, f"exited with code {procs[rank].exitcode} and no result")
            if dead:
                break
            if time.monotonic() > deadline:
                for rank in range(len(procs)):
                    outcomes.setdefault(rank, (False, "still running at the deadline: stopped"))
                break
    for rank in range(len(procs)):
        outcomes.setdefault(rank, (False, "stopped after another rank failed"))
    return outcomes


def _rank_main(
    target, rank, world_size, backend, store, collective_timeout_s, args, results
) -> None:
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
        try:
            results.put((rank, True, target(rank, *args)))
        finally:
            dist.destroy_process_group()
    except BaseException:
        results.put((rank, False, traceback.format_exc()))
