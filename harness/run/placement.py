"""Where and what a shard runs: whether this host has its hardware, and a split family's share.

The local executor and a CI stage job (`bot run-stage`) ask the same questions with what each
knows: the executor counts the slots its catalog maps to the shard's GPU type, a stage job the
GPUs that match the matrix entry's own device-name patterns (it has no catalog).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from stagebot.harness.run.collect import collect_tests
from stagebot.harness.run.gpus import Device, matches
from stagebot.stages.plan import MatrixEntry
from stagebot.stages.sharding import least_duration


def missing_hardware(entry: MatrixEntry, have: int, host: str, nodes: int = 1) -> str | None:
    """Why this host cannot run ``entry`` (None: it can). ``have``: the GPUs of the entry's type
    here, or the CPU slots for a CPU shard; ``host``: how to describe this host."""
    if nodes > 1:
        return f"needs {nodes} nodes; this executor runs on one host"
    if entry.gpu_count == 0:
        return None if have else "no CPU slot (--cpu-slots 0)"
    if have >= entry.gpu_count:
        return None
    if not entry.device_names:
        return (
            f"no device-name pattern names {entry.gpu_type} GPUs (the catalog gives none, or "
            "the matrix entry predates them: re-plan it with this stagebot)"
        )
    return (
        f"needs {entry.gpu_count} x {entry.gpu_type} GPU(s); this host has "
        f"{have or 'none'} of that type ({host})"
    )


def serving(entry: MatrixEntry, devices: list[Device]) -> list[str]:
    """The ids of the ``devices`` whose name matches one of the entry's device-name patterns."""
    return [device.id for device in devices if matches(device, entry.device_names)]


def is_split(entry: MatrixEntry) -> bool:
    """A shard of a multi-shard test family: its tests are the family's split, not fixed."""
    return entry.shards > 1 and entry.command is None and not entry.tests


def family_split(
    entry: MatrixEntry,
    root: Path,
    durations: Mapping[str, float],
    pinned: list[list[str]] | None = None,
) -> list[list[str]]:
    """The family's tests in ``entry.shards`` groups by recorded durations; ``pinned`` (an
    earlier pipeline's split of the same commit) is kept while it holds the same tests. Raises
    CollectError when the tests cannot be collected."""
    tests = collect_tests(entry, root)
    if pinned is not None and sorted(t for g in pinned for t in g) == sorted(tests):
        return pinned
    return [group.tests for group in least_duration(tests, durations, entry.shards)]
