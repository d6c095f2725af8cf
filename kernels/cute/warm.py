"""Compiling many cute kernels into the disk cache at once, one process per core.

A stage compiles each kernel the first time one of its cases needs it, one after the other: on
the H200 host a cold DGX_H200-PyTorch-1 spent 254.8 of its 298.6 s compiling 152 kernels, 1.7 s
each (NOTES.md, eighth session). ``warm`` compiles a list of keys in a pool of spawned processes
instead. Each builds its entry through compile_kernel, whose disk-cache lock keeps two processes
from building one entry twice, and the tests then load the entries. Shards that share the folder
warm one after another (a lock on the folder), each with every core, rather than all at once
with a pool each. Only a process that can launch a kernel can store it (compiled_io.dumps: a
machine without the GPU compiles but cannot store), so the first kernel that is not in the
folder after its compile stops the warm: on that machine (or with that folder: read-only, or
too small for the set) compiling ahead is wasted.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from stagebot.kernels.cute import disk_cache
from stagebot.kernels.cute.compile import CompileKey, compile_kernel, disk_entry_exists

JOBS_ENV = "STAGEBOT_CUTE_WARM_JOBS"
LOCK = "warm"  # the folder's lock while one process warms it


@dataclass
class WarmReport:
    jobs: int
    present: int = 0  # in the folder before
    stored: int = 0  # compiled and now in the folder
    unstored: int = 0  # compiled, yet not in the folder after: the warm stopped there
    failed: list[str] = field(default_factory=list)  # "kernel tactic: why"
    seconds: float = 0.0

    def __str__(self) -> str:
        text = (
            f"{self.stored} compiled into the cache on {self.jobs} processes in "
            f"{self.seconds:.1f} s, {self.present} there already"
        )
        if self.unstored:
            text += (
                f"; stopped: {self.unstored} compiled but not stored (no GPU here to load "
                "them, or the folder is read-only or smaller than the set)"
            )
        if self.failed:
            text += f"; {len(self.failed)} failed (first: {self.failed[0]})"
        return text


def default_jobs() -> int:
    """``$STAGEBOT_CUTE_WARM_JOBS`` (0: do not warm), else one process per core this process
    may run on."""
    raw = os.environ.get(JOBS_ENV)
    if raw is None:
        return len(os.sched_getaffinity(0))
    if not raw.isdigit():
        raise ValueError(f"{JOBS_ENV}={raw!r}: it must be a whole number of processes (0: off)")
    return int(raw)


def warm(keys: Iterable[CompileKey], folder: Path, jobs: int) -> WarmReport:
    """Compiles each of ``keys`` that ``folder`` lacks, ``jobs`` at a time. A key that fails is
    reported, not raised: its test compiles it again and reports the error where it belongs."""
    wanted = list(dict.fromkeys(keys))
    with disk_cache.DiskCache(folder).lock(LOCK):
        todo = [key for key in wanted if not disk_entry_exists(folder, key)]
        report = WarmReport(jobs=min(jobs, len(todo)), present=len(wanted) - len(todo))
        if todo and jobs > 0:
            start = time.perf_counter()
            _compile_all(todo, folder, report)
            report.seconds = time.perf_counter() - start
    return report


def _compile_all(todo: list[CompileKey], folder: Path, report: WarmReport) -> None:
    pool = ProcessPoolExecutor(
        max_workers=report.jobs,
        mp_context=multiprocessing.get_context("spawn"),  # no CUDA state forked into workers
        initializer=_use_folder,
        initargs=(str(folder),),
    )
    try:
        futures = {pool.submit(_build, key): key for key in todo}
        for future in as_completed(futures):
            key = futures[future]
            try:
                future.result()
            except Exception as error:  # a failed compile; a killed worker breaks the pool,
                why = (str(error).splitlines() or [""])[0]  # which fails every key left
                report.failed.append(f"{key.kernel} {key.tactic}: {type(error).__name__}: {why}")
                continue
            if not disk_entry_exists(folder, key):
                report.unstored += 1
                break
            report.stored += 1
    finally:  # also on Ctrl-C: the keys not started are dropped, not compiled first
        pool.shutdown(wait=True, cancel_futures=True)


def _use_folder(folder: str) -> None:
    """The worker's cache folder is the one warmed, whatever its environment says."""
    os.environ[disk_cache.ENV] = folder


def _build(key: CompileKey) -> None:
    compile_kernel(key)  # the compiled object stays in the worker; its entry is the result
