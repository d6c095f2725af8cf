"""A failing rank's traceback reaches the pytest report; no rank is left behind; a limit that runs
out says so (how long, which limit, the load), and a rank slow to exit keeps its result."""

from __future__ import annotations

import math
import os
import textwrap

import pytest

from stagebot.harness.analysis.rules import judge, read_sources
from stagebot.harness.suites.sharding_ir._spawn_probes import (
    never_returns,
    result_then_exit_3,
    segfault_on_rank_1,
    slow_to_exit,
)
from stagebot.harness.suites.sharding_ir.limits import SpawnLimits
from stagebot.harness.suites.sharding_ir.spawn import (
    RankFailure,
    SlowExitWarning,
    SpawnTimeout,
    run_on_ranks,
)


def test_failing_rank_reports_its_traceback():
    with pytest.raises(RankFailure) as info:
        run_on_ranks(math.log, world_size=2)  # math.log(0) fails on rank 0 only
    message = str(info.value)
    # rank 1 may be listed as stopped (on a loaded machine, before its result came in): it is not
    # counted as failed
    assert message.splitlines()[0] in (
        "1 of 2 ranks failed (gloo): rank 0: exception ValueError: math domain error",
        "1 of 2 ranks failed (gloo): rank 0: exception ValueError: math domain error; "
        "rank 1: stopped after another rank failed",
    )
    assert "--- rank 0: exception ValueError: math domain error ---" in message
    assert "Traceback" in message
    assert not isinstance(info.value, AssertionError)  # a rank's failure is not an assertion


def test_rank_killed_by_a_signal_says_so():
    with pytest.raises(RankFailure) as info:
        run_on_ranks(segfault_on_rank_1, world_size=2)
    first = str(info.value).splitlines()[0]
    assert "rank 1: killed by SIGSEGV (exit code -11)" in first, first


def test_rank_dying_before_its_target_reports_its_stderr(tmp_path, monkeypatch):
    """The target's module imports in the parent but raises in the children: they die while
    unpickling it, before any rank code runs; their traceback must still reach the report."""
    (tmp_path / "parent_only_mod.py").write_text(
        textwrap.dedent(
            f"""
            import os
            if os.getpid() != {os.getpid()}:
                raise ImportError("parent_only_mod only imports in the parent")
            def target(rank):
                return rank
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from parent_only_mod import target

    with pytest.raises(RankFailure) as info:
        run_on_ranks(target, world_size=2)
    message = str(info.value)
    assert "exited with code 1 and no result" in message
    assert "--- its stderr" in message and "Traceback" in message
    assert "ImportError: parent_only_mod only imports in the parent" in message


def test_rank_with_a_result_must_exit_zero():
    with pytest.raises(RankFailure) as info:
        run_on_ranks(result_then_exit_3, world_size=2)
    message = str(info.value)
    assert message.splitlines()[0] == (
        "2 of 2 ranks failed (gloo): rank 0: returned a result but exited with code 3; "
        "rank 1: returned a result but exited with code 3"
    )


def test_a_rank_slow_to_exit_keeps_its_result_with_a_warning():
    """Its result is in: being slow to leave (a loaded machine's teardown) fails nothing."""
    limits = SpawnLimits(exit_floor_s=1.0, exit_per_startup=0.0)
    with pytest.warns(SlowExitWarning) as record:
        assert run_on_ranks(slow_to_exit, world_size=2, limits=limits) == [0, 1]
    message = str(record[0].message)
    assert message.startswith("rank(s) 0, 1 returned a result but did not exit within the exit")
    assert "stopped, results kept; load average " in message, message


def test_a_run_past_its_limit_says_how_long_which_limit_and_the_load():
    with pytest.raises(SpawnTimeout) as info:
        run_on_ranks(never_returns, world_size=2, limits=SpawnLimits(run_s=2.0))
    first = str(info.value).splitlines()[0]
    assert first.startswith("2 ranks (gloo) timed out after "), first
    assert " s of run (limit 2 s: set by --sharding-ir-rank-timeout); load average " in first
    assert first.endswith(
        "rank 0: still running when the limit ran out; rank 1: still running when the limit ran out"
    ), first
    assert isinstance(info.value, RankFailure)
    # the failure analysis reads this message as the machine's limit, not the test's failure
    verdict = judge(read_sources(f"{type(info.value).__module__}.SpawnTimeout: {first}", ""))
    assert verdict.machine is not None and verdict.machine.name == "rank-deadline", verdict


def test_the_run_limit_scales_with_the_measured_start_up():
    """The run limit is the start-up the parent measured times the factor (no floor here)."""
    limits = SpawnLimits(run_floor_s=0.0, run_per_startup=0.05)
    with pytest.raises(SpawnTimeout) as info:
        run_on_ranks(never_returns, world_size=2, limits=limits)
    first = str(info.value).splitlines()[0]
    startup = float(first.split("0.05 x start-up ")[1].split(" s")[0])
    limit = float(first.split("(limit ")[1].split(" s")[0])
    assert startup > 0 and limit == pytest.approx(0.05 * startup, abs=0.01), first


def test_a_start_up_past_its_limit_is_a_timeout_of_the_start_up():
    with pytest.raises(SpawnTimeout) as info:  # no interpreter imports torch in 10 ms
        run_on_ranks(math.log, world_size=2, limits=SpawnLimits(start_s=0.01))
    first = str(info.value).splitlines()[0]
    assert "s of start-up (limit 0.01 s: the start-up limit); load average" in first, first
