"""`bot run-stage`: run one shard from a matrix entry (what a CI fan-out job calls; no ledger).

Exit codes: 0 SUCCESS / NOT_RUN / REUSED, 1 FAILURE or ABORTED, 3 ERROR (infrastructure).
"""

from __future__ import annotations

import sys
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
    from stagebot.harness.pipeline.stage_job import run_entry

    entry = load_entry(entry_arg)
    out = (out_dir or Path("out") / f"pipeline-{entry.pipeline}") / entry.stage
    result = run_entry(entry, out, root=root, shard_timeout=shard_timeout, echo=click.echo)
    click.echo(
        f"{result.stage}: {result.state}"
        + (f" — {result.evidence}" if result.evidence else "")
        + f" ({out / 'result.json'})"
    )
    sys.exit(EXIT[result.state])
