"""`bot run-stage`: run one shard from a matrix entry (what a CI fan-out job calls; no ledger).

Exit codes: 0 SUCCESS / NOT_RUN / REUSED, 1 FAILURE or ABORTED, 3 ERROR (infrastructure).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import click

from stagebot.bot.cli.run_options import (
    entry_option,
    load_entry,
    out_option,
    root_option,
    shard_timeout_option,
)

EXIT = {"SUCCESS": 0, "NOT_RUN": 0, "REUSED": 0, "FAILURE": 1, "ABORTED": 1, "ERROR": 3}


@click.command("run-stage")
@entry_option
@out_option
@shard_timeout_option
@root_option
def run_stage(entry_arg, out_dir, shard_timeout, root) -> None:
    """Run the shard a matrix entry describes; write its folder and print its state."""
    from stagebot.harness.run.collect import CollectError
    from stagebot.harness.run.gpus import describe, detect_devices
    from stagebot.harness.run.placement import (
        family_split,
        is_split,
        missing_hardware,
        serving,
    )
    from stagebot.harness.run.shard import ShardContext, not_run_result, run_shard, shard_timeout_s

    entry = load_entry(entry_arg)
    out = (out_dir or Path("out") / f"pipeline-{entry.pipeline}") / entry.stage
    devices = detect_devices()
    usable = serving(entry, devices)
    missing = missing_hardware(entry, len(usable) if entry.gpu_count else 1, describe(devices))
    if missing:
        result = not_run_result(entry, out, "NOT_RUN", missing)
    else:
        try:
            if is_split(entry):
                entry = replace(entry, tests=family_split(entry, root, {})[entry.shard - 1])
            context = ShardContext(
                out_dir=out,
                root=root,
                devices=tuple(usable[: entry.gpu_count]),
                timeout_s=shard_timeout_s(entry, shard_timeout),
                echo=click.echo if entry.detailed_log else None,
                keep_work=entry.debug,
            )
            result = run_shard(entry, context)
        except CollectError as error:
            result = not_run_result(entry, out, "ERROR", str(error))
    click.echo(
        f"{result.stage}: {result.state}"
        + (f" — {result.evidence}" if result.evidence else "")
        + f" ({out / 'result.json'})"
    )
    sys.exit(EXIT[result.state])
