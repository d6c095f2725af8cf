"""GPU-slot scheduling: which queued shards start now, and on which devices.

Pure and clock-free (times are passed in), so the executor drives it with real time and the
benchmark with simulated time. Every slot is a device that serves a set of GPU types (a CPU slot
serves ``CPU``); a job needs ``slots`` devices of its type. Policy: biggest first (expected
GPU-seconds, i.e. longest expected first among equals), with EASY backfilling — when the first job
in order does not fit, it gets a reservation at the earliest time enough devices free up, and later
jobs may start now only if they end before that time or use none of the reserved devices. So a
4-GPU shard is never starved by a stream of 1-GPU shards, and the gaps before it are filled.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

CPU = "CPU"


@dataclass(frozen=True)
class Job:
    key: str
    gpu_type: str  # "CPU" for CPU slots
    slots: int  # devices needed (a CPU shard needs one CPU slot)
    expected_s: float

    @property
    def priority(self) -> tuple[float, float, str]:
        return (-self.expected_s * self.slots, -self.expected_s, self.key)


@dataclass(frozen=True)
class Running:
    job: Job
    devices: tuple[str, ...]
    expected_end: float


class Scheduler:
    def __init__(self, devices: Mapping[str, Iterable[str]]):
        """``devices``: device id -> the GPU types it serves (CPU slots serve ``CPU``)."""
        self.devices = {device: frozenset(types) for device, types in devices.items()}

    @classmethod
    def with_cpu_slots(cls, gpus: Mapping[str, Iterable[str]], cpu_slots: int) -> Scheduler:
        return cls({**{f"cpu:{i}": (CPU,) for i in range(cpu_slots)}, **gpus})

    def capacity(self, gpu_type: str) -> int:
        """How many devices serve ``gpu_type`` on this host (0: a shard of it can never run)."""
        return sum(gpu_type in types for types in self.devices.values())

    def pick(
        self, queue: Iterable[Job], running: Iterable[Running], now: float
    ) -> list[tuple[Job, tuple[str, ...]]]:
        """The jobs to start at ``now`` and their devices; queue order does not matter."""
        running = list(running)
        free = set(self.devices) - {d for r in running for d in r.devices}
        started: list[tuple[Job, tuple[str, ...]]] = []
        shadow: float | None = None
        reserved: frozenset[str] = frozenset()
        for job in sorted(queue, key=lambda j: j.priority):
            if self.capacity(job.gpu_type) < job.slots:
                continue  # never fits here: the executor reports it NOT_RUN
            if shadow is None:
                devices = self._take(job, free, frozenset())
                if devices is not None:
                    free -= set(devices)
                    running.append(Running(job, devices, now + job.expected_s))
                    started.append((job, devices))
                else:
                    shadow, reserved = self._reservation(job, free, running, now)
                continue
            devices = self._take(job, free, reserved)
            if devices is None:
                continue
            if now + job.expected_s <= shadow or reserved.isdisjoint(devices):
                free -= set(devices)
                started.append((job, devices))
        return started

    def _take(self, job: Job, free: set[str], avoid: frozenset[str]) -> tuple[str, ...] | None:
        usable = sorted(d for d in free if job.gpu_type in self.devices[d])
        usable.sort(key=lambda d: d in avoid)  # stable: devices outside the reservation first
        return tuple(usable[: job.slots]) if len(usable) >= job.slots else None

    def _reservation(
        self, job: Job, free: set[str], running: list[Running], now: float
    ) -> tuple[float, frozenset[str]]:
        """The earliest expected time ``job`` fits, and the devices it would take then."""
        available = set(free)
        for run in sorted(running, key=lambda r: r.expected_end):
            available |= set(run.devices)
            devices = self._take(job, available, frozenset())
            if devices is not None:
                return max(run.expected_end, now), frozenset(devices)
        return float("inf"), frozenset(self.devices)


def simulate(scheduler: Scheduler, jobs: list[Job], actual_s: Mapping[str, float] | None = None):
    """Run ``jobs`` on simulated time; returns (makespan, {key: (start, end, devices)}).

    ``actual_s`` lets real durations differ from the expected ones the scheduler plans with.
    """
    actual_s = actual_s or {job.key: job.expected_s for job in jobs}
    queue = [job for job in jobs if scheduler.capacity(job.gpu_type) >= job.slots]
    running: list[Running] = []
    events: list[tuple[float, str]] = []
    placed: dict[str, tuple[float, float, tuple[str, ...]]] = {}
    now = 0.0
    while queue or running:
        for job, devices in scheduler.pick(queue, running, now):
            queue.remove(job)
            running.append(Running(job, devices, now + job.expected_s))
            end = now + actual_s[job.key]
            placed[job.key] = (now, end, devices)
            heapq.heappush(events, (end, job.key))
        if not events:
            break
        now, key = heapq.heappop(events)
        running = [r for r in running if r.job.key != key]
    makespan = max((end for _, end, _ in placed.values()), default=0.0)
    return makespan, placed
