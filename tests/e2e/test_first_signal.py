"""`bot run`'s first signal: each NEW failure said the moment its shard ends, fail-fast on NEW
failures only (a PRE-EXISTING one lets the others run), what it cancelled named in the report,
and a cancelled stage run again by the next `bot run`. Real pytest shards, a real ledger."""

from __future__ import annotations

import pytest
from fixtures.botrun import results, run_stages

pytestmark = pytest.mark.slow

TOGGLE = "tests/fixtures/suites/check_toggle.py::test_toggle"
BROKEN = {"STAGEBOT_FIXTURE_BROKEN": "1"}


def beside_slow(tmp_path, stage: str, *extra: str, env=None):
    """``stage`` run on main (the base), then on a PR commit beside CPU-PyTorch-Slow-1 (one
    10-minute test) on a second CPU slot; the PR run's CompletedProcess."""
    ledger = tmp_path / "ledger.sqlite"
    run_stages(ledger, tmp_path / "main", stage, extra=["--branch", "main"])
    assert stage in results(tmp_path / "main")  # the base ran
    stages = f"{stage}, CPU-PyTorch-Slow-1"
    extra = ["--cpu-slots", "2", *extra]
    return run_stages(ledger, tmp_path / "pr", stages, extra=extra, env=env, commit="beef")


def test_a_new_failure_is_said_as_its_shard_ends_and_cancels_the_running_stage(
    tmp_path,
) -> None:
    # Toggle-1 breaks (NEW: it passed on main) while Slow-1 runs beside it.
    done = beside_slow(tmp_path, "CPU-PyTorch-Toggle-1", env=BROKEN)
    assert done.returncode == 1, done.stdout + done.stderr
    said = f"NEW CPU-PyTorch-Toggle-1 {TOGGLE}: "
    assert said in done.stdout
    assert done.stdout.index(said) < done.stdout.index("Pipeline #2")  # before the report
    slow = results(tmp_path / "pr")["CPU-PyTorch-Slow-1"]
    why = f"NEW failure in CPU-PyTorch-Toggle-1: {TOGGLE}"
    # terminated for that reason, not waited for: its one test (10 minutes) never finished
    assert slow["state"] == "ABORTED"
    assert (
        slow["evidence"] == f"cancelled by fail-fast: {why} (--disable-fail-fast runs every stage)"
    )
    assert not any(test["outcome"] == "passed" for test in slow["tests"])
    assert f"Cancelled by fail-fast (1):** CPU-PyTorch-Slow-1, because {why}" in done.stdout


def test_a_pre_existing_failure_lets_the_other_stages_run(tmp_path) -> None:
    # Fail-1 fails as on main while Slow-1 runs beside it: Slow-1 goes on to its time limit
    done = beside_slow(tmp_path, "CPU-PyTorch-Fail-1", "--shard-timeout", "60")
    out = results(tmp_path / "pr")
    assert out["CPU-PyTorch-Fail-1"]["state"] == "FAILURE"
    slow = out["CPU-PyTorch-Slow-1"]  # timed out, not cancelled
    assert slow["state"] != "ABORTED" and "fail-fast" not in slow["evidence"], done.stdout
    assert "failure in CPU-PyTorch-Fail-1" not in done.stdout + done.stderr
    assert "NEW CPU-PyTorch-Fail-1" not in done.stdout and "PRE-EXISTING" in done.stdout


def test_a_stage_fail_fast_cancelled_is_run_by_the_next_run(tmp_path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    first = run_stages(ledger, tmp_path / "a", "CPU-PyTorch-Fail-1, CPU-PyTorch-Waived-1")
    assert results(tmp_path / "a")["CPU-PyTorch-Waived-1"]["state"] == "ABORTED", first.stdout
    run_stages(
        ledger, tmp_path / "b", "CPU-PyTorch-Fail-1, CPU-PyTorch-Waived-1", "--disable-fail-fast"
    )
    # the same commit: a cancelled stage is never "passed", so it runs (a REUSED one has no folder)
    assert results(tmp_path / "b")["CPU-PyTorch-Waived-1"]["state"] == "SUCCESS"
