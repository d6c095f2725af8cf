"""The test a shard's end caught (out of time, or SIGKILLed) is re-run alone before its failure
is called the machine's: one that hangs again with a longer limit is its own hang; a one-off
stall that passes alone stays the machine's limit (docs/failure-analysis.md)."""

from __future__ import annotations

import re

import pytest
from helpers.shards import entry

from stagebot.harness.analysis.rules import judge, read_sources
from stagebot.harness.run import shard as shard_module
from stagebot.harness.run.shard import (
    HANG_RERUN_CAP_S,
    ShardContext,
    hang_rerun_limit,
    run_shard,
)

HANGS = "import time\n\ndef test_waits():\n    time.sleep(600)\n"
STALLS_ONCE = (
    "import os, time\nfrom pathlib import Path\n\n"
    "def test_waits():\n"
    "    once = Path(os.environ['STAGEBOT_WORK']) / 'stalled-once'\n"
    "    if not once.exists():\n"
    "        once.touch()\n"
    "        time.sleep(600)\n"
)
TIMEOUT_S = 4.0  # the shard's: time for pytest to start and the test to begin


def _timed_out_shard(tmp_path, suite: str):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "check_suite.py").write_text(suite)
    context = ShardContext(out_dir=tmp_path / "out", root=root, timeout_s=TIMEOUT_S)
    result = run_shard(entry(), context)
    (test,) = result.tests
    return result, test


@pytest.mark.slow
def test_a_hang_that_reproduces_alone_is_its_own(tmp_path) -> None:
    result, test = _timed_out_shard(tmp_path, HANGS)
    assert result.state == "ERROR" and test.outcome == "error"
    found = re.search(r"; it hung again when re-run alone with a limit of (\d+) s$", test.evidence)
    assert found, test.evidence
    assert test.evidence.startswith("timeout: still running when the shard was killed after 4 s")
    assert TIMEOUT_S < int(found[1]) <= 2 * TIMEOUT_S + shard_module.HANG_RERUN_START_S
    assert test.attempts == 2
    verdict = judge(read_sources(test.evidence, None))
    assert verdict.machine is None  # not the shard's limit: judged against the base
    assert re.fullmatch(r"hang: hangs when run alone \(\d+ s limit\)", verdict.signature)


def test_a_one_off_stall_that_passes_alone_stays_the_machines(tmp_path) -> None:
    """The control: the same timeout, a test that passes when re-run alone."""
    result, test = _timed_out_shard(tmp_path, STALLS_ONCE)
    assert result.state == "ERROR"
    assert test.evidence.endswith("; it passed when re-run alone"), test.evidence
    verdict = judge(read_sources(test.evidence, None))
    assert verdict.machine is not None and verdict.machine.name == "shard-timeout"
    assert verdict.signature is None or not verdict.signature.startswith("hang:")


def test_the_rerun_limit_is_twice_the_time_the_test_had_and_bounded() -> None:
    """What a timed-out shard costs on top: at most HANG_RERUN_CAP_S; a test that had run over
    half of it is not re-run (its timeout stays the machine's limit)."""
    start = shard_module.HANG_RERUN_START_S
    assert hang_rerun_limit(0.0) == start  # pytest's start-up, at least
    assert hang_rerun_limit(58.0) == 116.0 + start
    assert hang_rerun_limit((HANG_RERUN_CAP_S - start) / 2) == HANG_RERUN_CAP_S
    assert hang_rerun_limit((HANG_RERUN_CAP_S - start) / 2 + 1) is None


def test_a_test_that_ran_too_long_to_rerun_says_so(tmp_path, monkeypatch) -> None:
    """The cap: no re-run, the evidence says why, and the timeout stays the machine's."""
    monkeypatch.setattr(shard_module, "HANG_RERUN_CAP_S", 1.0)
    result, test = _timed_out_shard(tmp_path, HANGS)
    assert re.search(r"; not re-run alone: it had run \d+ s, over half the re-run's cap \(1 s\)$",
                     test.evidence), test.evidence  # fmt: skip
    assert test.attempts == 1
    assert judge(read_sources(test.evidence, None)).machine.name == "shard-timeout"
