"""A failing rank's traceback reaches the pytest report; no rank is left behind."""

from __future__ import annotations

import math
import os
import textwrap

import pytest

from stagebot.harness.suites.sharding_ir._spawn_probes import (
    result_then_exit_3,
    segfault_on_rank_1,
)
from stagebot.harness.suites.sharding_ir.spawn import RankFailure, run_on_ranks


def test_failing_rank_reports_its_traceback():
    with pytest.raises(RankFailure) as info:
        run_on_ranks(math.log, world_size=2, timeout_s=120)  # math.log(0) fails on rank 0 only
    message = str(info.value)
    assert message.startswith(
        "1 of 2 ranks failed (gloo): rank 0: exception ValueError: math domain error\n"
    )
    assert "--- rank 0: exception ValueError: math domain error ---" in message
    assert "Traceback" in message
    assert not isinstance(info.value, AssertionError)  # a rank's failure is not an assertion


def test_rank_killed_by_a_signal_says_so():
    with pytest.raises(RankFailure) as info:
        run_on_ranks(segfault_on_rank_1, world_size=2, timeout_s=120)
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
        run_on_ranks(target, world_size=2, timeout_s=120)
    message = str(info.value)
    assert "exited with code 1 and no result" in message
    assert "--- its stderr" in message and "Traceback" in message
    assert "ImportError: parent_only_mod only imports in the parent" in message


def test_rank_with_a_result_must_exit_zero():
    with pytest.raises(RankFailure) as info:
        run_on_ranks(result_then_exit_3, world_size=2, timeout_s=120)
    message = str(info.value)
    assert message.splitlines()[0] == (
        "2 of 2 ranks failed (gloo): rank 0: returned a result but exited with code 3; "
        "rank 1: returned a result but exited with code 3"
    )
