"""`bot report`: render a recorded pipeline, or one assembled from StageResult files."""

from __future__ import annotations

from pathlib import Path

import click

from stagebot.bot.run_options import ledger_option


@click.command("report")
@ledger_option
@click.option(
    "--pipeline",
    "number",
    type=click.IntRange(min=1),
    default=None,
    help="The pipeline to render (with --ledger; default: the latest).",
)
@click.option(
    "--results",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="A folder of shard folders holding result.json files.",
)
@click.option(
    "--format", "fmt", type=click.Choice(["md", "html", "json"]), default="md", show_default=True
)
@click.option(
    "--base-ledger",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A read-only ledger holding the base pipelines.",
)
def report(ledger, number, results, fmt, base_ledger) -> None:
    """Render a pipeline's report (--ledger PATH [--pipeline N] | --results DIR)."""
    from stagebot.bot.ledger import Ledger
    from stagebot.harness.report import render_report, report_from_record, report_from_results

    if (ledger is None) == (results is None):
        raise click.UsageError(
            "give exactly one of --ledger PATH (with --pipeline N) or --results DIR"
        )
    if results is not None:
        click.echo(render_report(report_from_results(results, pipeline=number), fmt), nl=False)
        return
    book = Ledger.open(ledger, readonly=True)
    number = number or book.latest_number()
    record = book.pipeline(number) if number else None
    if record is None:
        raise click.BadParameter(
            f"{ledger} has no pipeline #{number}" if number else f"{ledger} has no pipeline yet",
            param_hint="--pipeline",
        )
    base_book = Ledger.open(base_ledger, readonly=True) if base_ledger else book
    base = record.meta.get("base_pipeline")
    if base_ledger:
        base = base_book.base_pipeline(record.base_commit, "main")
    outcomes = base_book.test_outcomes(base) if base else None
    rendered = report_from_record(record, base=outcomes, base_pipeline=base)
    click.echo(render_report(rendered, fmt), nl=False)
