"""One shard of a pipeline, run by a stage job from its matrix entry (`bot run-stage`; no
ledger): one call, ``run_entry``.

Below it: whether this host has the shard's hardware (else NOT_RUN), its share of a split
family, the devices it may use, and the shard run into its folder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from stagebot.harness.results import StageResult
from stagebot.harness.run.collect import CollectError
from stagebot.harness.run.gpus import describe, detect_devices
from stagebot.harness.run.placement import family_split, is_split, missing_hardware, serving
from stagebot.harness.run.shard import ShardContext, not_run_result, run_shard, shard_timeout_s
from stagebot.stages.plan import MatrixEntry


def run_entry(
    entry: MatrixEntry,
    out: Path,
    *,
    root: Path,
    shard_timeout: float | None,
    echo: Callable[[str], None] | None,
) -> StageResult:
    """Run the shard ``entry`` describes into ``out`` (its folder); ``echo``: where a detailed
    log goes, when the entry asks for one."""
    devices = detect_devices()
    usable = serving(entry, devices)
    missing = missing_hardware(entry, len(usable) if entry.gpu_count else 1, describe(devices))
    if missing:
        return not_run_result(entry, out, "NOT_RUN", missing)
    try:
        if is_split(entry):
            entry = replace(entry, tests=family_split(entry, root, {})[entry.shard - 1])
        context = ShardContext(
            out_dir=out,
            root=root,
            devices=tuple(usable[: entry.gpu_count]),
            timeout_s=shard_timeout_s(entry, shard_timeout),
            echo=echo if entry.detailed_log else None,
            keep_work=entry.debug,
        )
        return run_shard(entry, context)
    except CollectError as error:
        return not_run_result(entry, out, "ERROR", str(error))
