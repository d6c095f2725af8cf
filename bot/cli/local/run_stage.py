"""`bot run-stage`: run one shard from a matrix entry (what a CI fan-out job calls; no ledger).

Exit codes: 0 SUCCESS / NOT_RUN / REUSED, 1 FAILURE or ABORTED, 3 ERROR (infrastructure).
"""

from __future__ import annotations

import sys

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
    from stagebot.harness.ledger.location import default_stage_folder
    from stagebot.harness.pipeline.stage_job import run_entry

    entry = load_entry(entry_arg)
    # without --out, outside the repository: the code under test cannot reach it
    where = out_dir / entry.stage if out_dir else None
    out = where or default_stage_folder(root, entry.pipeline, entry.stage)
    result = run_entry(entry, out, root=root, shard_timeout=shard_timeout, echo=click.echo)
    click.echo(
        f"{result.stage}: {result.state}"
        + (f" — {result.evidence}" if result.evidence else "")
        + f" ({out / 'result.json'})"
    )
    sys.exit(EXIT[result.state])
