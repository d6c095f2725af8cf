"""What a pipeline cost in GPU time: per stage and in total, the GPU-minutes it ran, those reuse
saved and those fail-fast cancelled.

A stage's GPU-minutes are seconds x its planned GPU count / 60 (CPU stages count none):
- run: the seconds its shard ran here (an aborted shard: until it was stopped);
- reused: the recorded durations of the tests it did not run because a result was reused (a
  REUSED shard's passed tests, tests reused by commit or by key), as the ledger copied them from
  the run that ran them;
- cancelled: for a shard fail-fast cancelled, what its stage's last full run in the ledger took,
  less what it ran before it was stopped (none when the ledger has no full run of it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from stagebot.harness.results import FAIL_FAST, StageResult

FIGURES = ("run", "reused", "cancelled")


@dataclass(frozen=True)
class StageGpuTime:
    stage: str
    gpu_type: str
    gpus: int
    run: float  # GPU-minutes
    reused: float
    cancelled: float

    def figures(self) -> dict[str, float]:
        return {"run": self.run, "reused": self.reused, "cancelled": self.cancelled}


def cancelled_by_fail_fast(result: StageResult) -> bool:
    return result.state == "ABORTED" and (result.evidence or "").startswith(FAIL_FAST)


def stage_gpu_times(
    results: Iterable[StageResult],
    gpu_counts: Mapping[str, int],
    reused_seconds: Mapping[str, float],
    expected_seconds: Mapping[str, float],
) -> list[StageGpuTime]:
    """One row per result. ``gpu_counts``: stage -> its planned GPUs; ``reused_seconds``: stage
    -> its reused tests' recorded seconds; ``expected_seconds``: stage -> its last full run's
    seconds, for the shards fail-fast cancelled."""
    rows = []
    for result in results:
        gpus = gpu_counts.get(result.stage, 0)
        ran = 0.0 if result.state in ("REUSED", "NOT_RUN") else result.duration_s
        cancelled = 0.0
        if cancelled_by_fail_fast(result):
            cancelled = max(expected_seconds.get(result.stage, 0.0) - ran, 0.0)
        rows.append(
            StageGpuTime(
                result.stage,
                result.gpu_type,
                gpus,
                run=gpus * ran / 60,
                reused=gpus * reused_seconds.get(result.stage, 0.0) / 60,
                cancelled=gpus * cancelled / 60,
            )
        )
    return rows


def total(rows: Iterable[StageGpuTime]) -> dict[str, float]:
    """run / reused / cancelled GPU-minutes, summed over ``rows``."""
    sums = dict.fromkeys(FIGURES, 0.0)
    for row in rows:
        for name, value in row.figures().items():
            sums[name] += value
    return sums


def by_gpu_type(rows: Iterable[StageGpuTime]) -> dict[str, dict[str, float]]:
    """GPU type -> its run / reused / cancelled GPU-minutes (CPU stages left out)."""
    grouped: dict[str, list[StageGpuTime]] = {}
    for row in rows:
        if row.gpus:
            grouped.setdefault(row.gpu_type, []).append(row)
    return {gpu_type: total(group) for gpu_type, group in sorted(grouped.items())}


def minutes_text(minutes: float) -> str:
    return f"{minutes:.1f}"
