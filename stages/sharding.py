"""Split a stage family's tests into its shards by recorded durations (least-duration greedy).

Pure functions over plain data, shaped like pytest-split's algorithms: the longest test goes to
the shard with the least total so far; tests without a recorded duration count as the average of
the known ones (1 s when none is known). Every shard keeps its tests in collection order, and the
split is deterministic, so every fan-out job computes the same one from the same inputs.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_DURATION_S = 1.0


@dataclass(frozen=True)
class ShardGroup:
    index: int  # 1-based
    tests: list[str]
    expected_s: float


def least_duration(
    tests: list[str], durations: Mapping[str, float], shards: int
) -> list[ShardGroup]:
    """``shards`` groups covering ``tests`` exactly once, balanced by expected duration."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    known = [durations[t] for t in tests if t in durations]
    fallback = sum(known) / len(known) if known else DEFAULT_DURATION_S
    weights = {test: durations.get(test, fallback) for test in tests}
    order = {test: position for position, test in enumerate(tests)}
    heap = [(0.0, index) for index in range(shards)]
    members: list[list[str]] = [[] for _ in range(shards)]
    for test in sorted(tests, key=lambda t: (-weights[t], order[t])):
        total, index = heapq.heappop(heap)
        members[index].append(test)
        heapq.heappush(heap, (total + weights[test], index))
    return [
        ShardGroup(
            index + 1,
            sorted(group, key=order.__getitem__),
            round(sum(weights[t] for t in group), 3),
        )
        for index, group in enumerate(members)
    ]
