"""A failing rank's traceback reaches the pytest report; no rank is left behind."""

from __future__ import annotations

import math

import pytest

from stagebot.harness.suites.sharding_ir.spawn import RankFailure, run_on_ranks


def test_failing_rank_reports_its_traceback():
    with pytest.raises(RankFailure) as info:
        run_on_ranks(math.log, world_size=2, timeout_s=120)  # math.log(0) fails on rank 0 only
    message = str(info.value)
    assert "--- rank 0 ---" in message and "ValueError: math domain error" in message
    assert "Traceback" in message
