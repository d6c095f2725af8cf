"""`bot run-stage`: run one shard from a matrix entry (what a CI fan-out job calls; no ledger).

Exit codes: 0 SUCCESS / NOT_RUN / REUSED, 1 FAILURE or ABORTED, 3 ERROR (infrastructure).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import click

from stagebot.bot.run_options import out_option, root_option, shard_timeout_option

EXIT = {"SUCCESS": 0, "NOT_RUN": 0, "REUSED": 0, "FAILURE": 1, "ABORTED": 1, "ERROR": 3}


@click.command("run-stage")
@click.option(
    "--entry",
    "entry_arg",
    required=True,
    metavar="FILE|JSON",
    help="The matrix entry: a JSON file, or the JSON text itself.",
)
@out_option
@shard_timeout_option
@root_option
def run_stage(entry_arg, out_dir, shard_timeout, root) -> None:
    """Run the shard a matrix entry describes; write its folder and print its state."""
    from stagebot.harness.collect import CollectError
    from stagebot.harness.gpus import describe, detect_devices
    from stagebot.harness.pipeline.placement import (
        family_split,
        is_split,
        missing_hardware,
        serving,
    )
    from stagebot.harness.shard import ShardContext, not_run_result, run_shard, shard_timeout_s
    from stagebot.stages.plan import MatrixEntry

    entry = MatrixEntry.from_json(_load(entry_arg))
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


def _load(arg: str) -> dict:
    from stagebot.stages.errors import PlanError

    path = Path(arg)
    text = (
        path.read_text(encoding="utf-8")
        if not arg.lstrip().startswith("{") and path.is_file()
        else arg
    )
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise PlanError(
            f"--entry: neither a JSON file nor JSON text ({error}); give the "
            "matrix entry's file or its JSON"
        ) from None
