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
    from stagebot.harness.collect import CollectError, split_family
    from stagebot.harness.gpus import describe, detect_devices
    from stagebot.harness.shard import (
        ShardContext,
        not_run_result,
        run_shard,
        shard_timeout_s,
    )
    from stagebot.stages.plan import MatrixEntry

    entry = MatrixEntry.from_json(_load(entry_arg))
    out = (out_dir or Path("out") / f"pipeline-{entry.pipeline}") / entry.stage
    devices = detect_devices()
    usable = [d.id for d in devices if _serves(d.name, entry)]
    if entry.gpu_count and not entry.device_names:
        why = (
            f"the matrix entry names no device-name pattern for {entry.gpu_type} (device_names "
            "is empty): re-plan it with this stagebot"
        )
        result = not_run_result(entry, out, "NOT_RUN", why)
    elif entry.gpu_count and len(usable) < entry.gpu_count:
        result = not_run_result(
            entry,
            out,
            "NOT_RUN",
            f"needs {entry.gpu_count} x {entry.gpu_type} GPU(s); this host has {describe(devices)}",
        )
    else:
        try:
            if entry.shards > 1 and not entry.tests and entry.command is None:
                share = split_family(entry, root, {})[entry.shard - 1].tests
                entry = replace(entry, tests=share)
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


def _serves(name: str, entry) -> bool:
    """Whether a GPU named ``name`` serves the entry's GPU type (its own device-name patterns:
    a matrix entry needs no catalog)."""
    import fnmatch

    return any(fnmatch.fnmatchcase(name, pattern) for pattern in entry.device_names)


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
