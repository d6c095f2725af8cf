"""Benchmark: the GPU-slot scheduler's makespan against the lower bound.

Run from the repository root:  python tests/bench/bench_scheduler.py [--seeds N]
200 shards with a seeded duration mix (20% need 4 GPUs) on 4 simulated GPU slots; prints
makespan / max(total GPU-seconds / slots, longest shard) per seed (target: <= 1.10), also with
actual durations that deviate +-30% from the expected ones the scheduler plans with.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from stagebot.harness.run.scheduler import Job, Scheduler, simulate

SLOTS = 4
SHARDS = 200


def jobs_for(seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for index in range(SHARDS):
        wide = rng.random() < 0.2
        # A mix: many short shards, some medium, a few long ones (seconds).
        duration = rng.choice(
            [rng.uniform(30, 120)] * 6 + [rng.uniform(300, 900)] * 3 + [rng.uniform(1200, 2400)]
        )
        jobs.append(Job(f"shard-{index}", "H200", 4 if wide else 1, round(duration, 1)))
    return jobs


def ratio(jobs: list[Job], actual: dict[str, float] | None = None) -> tuple[float, float, float]:
    scheduler = Scheduler({str(i): ("H200",) for i in range(SLOTS)})
    makespan, placed = simulate(scheduler, jobs, actual)
    durations = actual or {job.key: job.expected_s for job in jobs}
    gpu_seconds = sum(durations[job.key] * job.slots for job in jobs)
    bound = max(gpu_seconds / SLOTS, max(durations.values()))
    assert len(placed) == len(jobs)
    return makespan / bound, makespan, bound


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    exact, noisy = [], []
    start = time.perf_counter()
    for seed in range(args.seeds):
        jobs = jobs_for(seed)
        r, makespan, bound = ratio(jobs)
        exact.append(r)
        rng = random.Random(seed + 1000)
        actual = {job.key: job.expected_s * rng.uniform(0.7, 1.3) for job in jobs}
        noisy.append(ratio(jobs, actual)[0])
        print(
            f"seed {seed}: makespan {makespan:8.0f} s  bound {bound:8.0f} s  ratio {r:.3f}"
            f"  (±30% actual durations: {noisy[-1]:.3f})"
        )
    elapsed = time.perf_counter() - start
    print(
        f"{SHARDS} shards (20% x 4 GPUs) on {SLOTS} slots, {args.seeds} seeds: "
        f"ratio median {statistics.median(exact):.3f}, worst {max(exact):.3f} (target <= 1.10); "
        f"with ±30% noise median {statistics.median(noisy):.3f}, worst {max(noisy):.3f}; "
        f"scheduling time {elapsed / args.seeds * 1000:.0f} ms per 200-shard plan"
    )


if __name__ == "__main__":
    main()
