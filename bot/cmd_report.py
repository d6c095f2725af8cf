"""`bot report`: render a recorded pipeline, or one assembled from StageResult files."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import click

from stagebot.bot.errors import StagebotError
from stagebot.bot.run_options import (
    base_ledger_option,
    default_ledger,
    ledger_option,
    pipeline_option,
)


@click.command("report")
@ledger_option
@pipeline_option("The pipeline to render (with --ledger; default: the latest).")
@click.option(
    "--results",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="A folder of shard folders holding result.json files.",
)
@click.option(
    "--format", "fmt", type=click.Choice(["md", "html", "json"]), default="md", show_default=True
)
@base_ledger_option
def report(ledger, number, results, fmt, base_ledger) -> None:
    """Render a pipeline's report: from a ledger (default: `bot run`'s, the newest pipeline)
    or from a folder of StageResult files (--results DIR)."""
    from stagebot.bot.ledger import Ledger
    from stagebot.bot.worktree import repository_root
    from stagebot.harness.report import render_report, report_from_record, report_from_results

    if ledger is not None and results is not None:
        raise click.UsageError("give --ledger PATH or --results DIR, not both")
    if results is not None:
        click.echo(render_report(report_from_results(results, pipeline=number), fmt), nl=False)
        return
    if ledger is None:
        ledger = default_ledger(repository_root(Path.cwd()))
        if not ledger.exists():
            raise StagebotError(
                f"no ledger at {ledger} (`bot run` writes it there): run `bot run` first, "
                "or give --ledger PATH or --results DIR"
            )
    with ExitStack() as stack:
        book = stack.enter_context(Ledger.open(ledger, readonly=True))
        number = number or book.latest_number()
        record = book.pipeline(number) if number else None
        if record is None:
            why = f"has no pipeline #{number}" if number else "has no pipeline yet"
            raise click.BadParameter(f"{ledger} {why}", param_hint="--pipeline")
        base_book = (
            stack.enter_context(Ledger.open(base_ledger, readonly=True)) if base_ledger else book
        )
        base = record.meta.get("base_pipeline")
        if base_ledger:
            base = base_book.base_pipeline(record.base_commit, "main")
        outcomes = base_book.test_outcomes(base) if base else None
    rendered = report_from_record(record, base=outcomes, base_pipeline=base)
    click.echo(render_report(rendered, fmt), nl=False)
