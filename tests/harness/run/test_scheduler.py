"""The GPU-slot scheduler (EASY backfill) and least-duration shard splitting: pure functions."""

from __future__ import annotations

import random

import pytest

from stagebot.harness.run.scheduler import Job, Running, Scheduler, simulate
from stagebot.stages.sharding import least_duration


def four_gpus() -> Scheduler:
    return Scheduler.with_cpu_slots({str(i): ("H200",) for i in range(4)}, cpu_slots=1)


def test_jobs_get_distinct_devices_of_their_type_and_cpu_slots_apart() -> None:
    picked = four_gpus().pick(
        [Job("a", "H200", 2, 10), Job("b", "H200", 2, 5), Job("c", "CPU", 1, 3)], [], 0.0
    )
    devices = {job.key: set(slots) for job, slots in picked}
    assert devices["a"] | devices["b"] == {"0", "1", "2", "3"} and not devices["a"] & devices["b"]
    assert devices["c"] == {"cpu:0"}


def test_longest_first_and_unfit_jobs_left_for_not_run() -> None:
    scheduler = four_gpus()
    picked = scheduler.pick(
        [Job("short", "H200", 1, 1), Job("long", "H200", 1, 100), Job("b200", "B200", 1, 1)],
        [Running(Job("x", "H200", 3, 50), ("0", "1", "2"), 50)],
        0.0,
    )
    assert [job.key for job, _ in picked] == ["long"]
    assert scheduler.capacity("B200") == 0 and scheduler.capacity("H200") == 4


def test_backfill_never_delays_the_reserved_wide_job() -> None:
    scheduler = four_gpus()
    running = [Running(Job("r", "H200", 1, 10), ("0",), 10.0)]
    queue = [Job("wide", "H200", 4, 100), Job("fits", "H200", 1, 9), Job("late", "H200", 1, 50)]
    picked = [job.key for job, _ in scheduler.pick(queue, running, 0.0)]
    assert picked == ["fits"]  # ends by t=10, when the wide job can start; "late" would delay it


def test_a_device_can_serve_several_types() -> None:
    scheduler = Scheduler({"0": ("B200", "DGX_B200")})
    assert scheduler.capacity("DGX_B200") == 1 and scheduler.capacity("B200") == 1


@pytest.mark.parametrize("seed", range(5))
def test_simulation_never_overlaps_a_device_and_places_every_job(seed: int) -> None:
    rng = random.Random(seed)
    jobs = [
        Job(f"j{i}", "H200", rng.choice([1, 1, 1, 2, 4]), rng.uniform(1, 100)) for i in range(60)
    ]
    actual = {job.key: job.expected_s * rng.uniform(0.5, 1.5) for job in jobs}
    makespan, placed = simulate(four_gpus(), jobs, actual)
    assert set(placed) == {job.key for job in jobs}
    intervals: dict[str, list[tuple[float, float]]] = {}
    for start, end, devices in placed.values():
        for device in devices:
            intervals.setdefault(device, []).append((start, end))
    for spans in intervals.values():
        spans.sort()
        pairs = zip(spans, spans[1:], strict=False)
        assert all(a_end <= b_start + 1e-9 for (_, a_end), (b_start, _) in pairs)
    assert makespan == max(end for _, end, _ in placed.values())


def test_benchmark_mix_is_close_to_the_lower_bound() -> None:
    """The benchmark's workload (simulated time, deterministic): makespan within 10% of bound."""
    rng = random.Random(0)
    jobs = [
        Job(f"s{i}", "H200", 4 if rng.random() < 0.2 else 1, rng.uniform(30, 2400))
        for i in range(200)
    ]
    scheduler = Scheduler({str(i): ("H200",) for i in range(4)})
    makespan, _ = simulate(scheduler, jobs)
    bound = max(sum(j.expected_s * j.slots for j in jobs) / 4, max(j.expected_s for j in jobs))
    assert makespan / bound <= 1.10


def test_least_duration_balances_and_covers_every_test_once() -> None:
    tests = [f"t{i}" for i in range(10)]
    durations = {f"t{i}": float(i + 1) for i in range(10)}  # 55 s in all
    groups = least_duration(tests, durations, 3)
    assert sorted(t for g in groups for t in g.tests) == sorted(tests)
    assert max(g.expected_s for g in groups) - min(g.expected_s for g in groups) <= 1
    for group in groups:  # collection order kept inside a shard
        assert group.tests == sorted(group.tests, key=tests.index)
    assert least_duration(tests, durations, 3) == groups  # deterministic


def test_unknown_tests_weigh_the_average_and_extra_shards_stay_empty() -> None:
    groups = least_duration(["a", "b", "new"], {"a": 10.0, "b": 2.0}, 2)
    assert {g.expected_s for g in groups} == {10.0, 8.0}  # "new" counts as 6 s
    assert [g.tests for g in least_duration(["a"], {}, 3)] == [["a"], [], []]
    with pytest.raises(ValueError, match="at least 1"):
        least_duration(["a"], {}, 0)
