"""`bot report`: render a recorded pipeline, or one assembled from StageResult files; both against
the same base selection (``harness/pipeline/base.py``)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import click

from stagebot.bot.cli.run_options import (
    base_ledger_option,
    ledger_option,
    pipeline_option,
    root_option,
)
from stagebot.harness.ledger.location import default_ledger
from stagebot.stages.errors import StagebotError


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
    "--format",
    "fmt",
    type=click.Choice(["md", "text", "html", "json"]),
    default="md",
    show_default=True,
    help="md: GitHub's markdown; text: the same for a terminal (no HTML); html; json.",
)
@base_ledger_option
@click.option(
    "--base-commit", default=None, help="With --results: the base commit to compare with."
)
@root_option
def report(ledger, number, results, fmt, base_ledger, base_commit, root) -> None:
    """Render a pipeline's report: from a ledger (default: `bot run`'s, the newest pipeline)
    or from a folder of StageResult files (--results DIR)."""
    from stagebot.harness.ledger.book import Ledger
    from stagebot.harness.pipeline.base import select_base
    from stagebot.harness.pipeline.worktree import repository_root
    from stagebot.harness.report import render_report, report_from_record, report_from_results

    if ledger is not None and results is not None:
        raise click.UsageError("give --ledger PATH or --results DIR, not both")
    if ledger is None and results is None:
        ledger = default_ledger(repository_root(Path.cwd()))
        if not ledger.exists():
            raise StagebotError(
                f"no ledger at {ledger} (`bot run` writes it there): run `bot run` first, "
                "or give --ledger PATH or --results DIR"
            )
    with ExitStack() as stack:
        base_book = (
            stack.enter_context(Ledger.open(base_ledger, readonly=True)) if base_ledger else None
        )
        if results is not None:
            base = select_base(None, base_book=base_book, base_commit=base_commit)
            rendered = report_from_results(results, pipeline=number, base=base)
        else:
            book = stack.enter_context(Ledger.open(ledger, readonly=True))
            number = number or book.latest_number()
            record = book.pipeline(number) if number else None
            if record is None:
                why = f"has no pipeline #{number}" if number else "has no pipeline yet"
                raise click.BadParameter(f"{ledger} {why}", param_hint="--pipeline")
            base = select_base(
                book,
                base_book=base_book,
                base_commit=record.base_commit or base_commit,
                exclude=record.number,
                pinned=record.meta.get("base_pipeline"),
            )
            rendered = report_from_record(record, base=base, root=root)
            rendered.ledger = str(ledger)  # a local pipeline's re-run names it
    click.echo(render_report(rendered, fmt), nl=False)
