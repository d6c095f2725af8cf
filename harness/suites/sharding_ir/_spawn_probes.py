"""Rank targets for test_spawn; a module of the package so that spawned children can import them."""

from __future__ import annotations

import os
import signal
import time
from multiprocessing import util


def result_then_exit_3(rank: int) -> int:
    """Return a result, then exit with code 3 once the result queue has been flushed."""
    # After the queue's own exit finalizer (priority -5) has flushed the result to the parent.
    util.Finalize(None, os._exit, args=(3,), exitpriority=-10)
    return rank


def segfault_on_rank_1(rank: int) -> int:
    """Rank 1 dies of SIGSEGV (as a crashing kernel or extension would); rank 0 returns."""
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSEGV)
    return rank


def slow_to_exit(rank: int) -> int:
    """Return a result, then take ten minutes to exit (a teardown on a loaded machine)."""
    util.Finalize(None, time.sleep, args=(600,), exitpriority=-10)
    return rank


def never_returns(rank: int) -> int:
    """Run past any limit a test sets (the parent stops it)."""
    time.sleep(600)
    return rank
