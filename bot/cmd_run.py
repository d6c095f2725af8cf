"""`bot run`: plan a comment with the ledger as history, run it on this host, report, exit.

Exit codes: 0 SUCCESS; 1 a NEW / PRE-EXISTING / UNCLASSIFIED failure, or the run was cancelled
(ABORTED); 3 only infrastructure failures, or the ledger is unusable (nothing ran then);
2 a usage error. `/bot reuse-pipeline [N]` records that the commit is validated by N.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import click

from stagebot.bot.cli_options import (
    catalog_option,
    changed_files_option,
    comment_argument,
    commit_option,
    pr_option,
    read_changed_files,
    read_comment,
)
from stagebot.bot.run_options import (
    DEFAULT_LEDGER,
    ledger_option,
    out_option,
    root_option,
    shard_timeout_option,
)

DEFAULT_BRANCH = "main"


@click.command("run")
@catalog_option
@ledger_option
@changed_files_option
@commit_option
@pr_option
@out_option
@click.option(
    "--cpu-slots",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Shards of CPU stages that may run at once.",
)
@click.option("--base-commit", default=None, help="The PR's base commit (failures compare to it).")
@click.option(
    "--branch",
    default=None,
    help="The branch this run tests (recorded; a run on "
    f"{DEFAULT_BRANCH} is the base for PRs without a base-commit pipeline).",
)
@click.option(
    "--base-ledger",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A second, read-only ledger holding the base pipelines.",
)
@click.option(
    "--pipeline",
    "number",
    type=click.IntRange(min=1),
    default=None,
    help="Use this pipeline number (in Actions: the workflow run number).",
)
@shard_timeout_option
@root_option
@comment_argument
def run(
    catalog,
    ledger,
    changed_files,
    commit,
    pr,
    out_dir,
    cpu_slots,
    base_commit,
    branch,
    base_ledger,
    number,
    shard_timeout,
    root,
    comment,
) -> None:
    """Plan COMMENT (or '-' for stdin) and run it here; print the report."""
    from stagebot.bot.grammar import parse_comment
    from stagebot.bot.ledger import Ledger
    from stagebot.bot.worktree import tree_identity

    command = parse_comment(read_comment(comment))
    if command.name not in ("run", "reuse-pipeline"):
        what = "no /bot command" if command.name is None else f"`/bot {command.name}`"
        click.echo(
            f"{what}: nothing to run here (`bot run` runs `/bot run` and records "
            "`/bot reuse-pipeline`)"
        )
        return
    ledger_path = ledger or DEFAULT_LEDGER
    if ledger is None:
        ledger_path.parent.mkdir(parents=True, exist_ok=True)
    dirty = False
    if commit is None:
        commit, dirty = tree_identity(root)
    book = Ledger.open(ledger_path)
    if command.name == "reuse-pipeline":
        sys.exit(_reuse_pipeline(book, command, commit, pr, root))
    sys.exit(
        _run(
            command,
            book,
            catalog,
            changed_files,
            commit,
            dirty,
            pr,
            out_dir,
            cpu_slots,
            base_commit,
            branch,
            base_ledger,
            number,
            shard_timeout,
            root,
        )
    )


def _run(
    command,
    book,
    catalog_path,
    changed_files,
    commit,
    dirty,
    pr,
    out_dir,
    cpu_slots,
    base_commit,
    branch,
    base_ledger,
    number,
    shard_timeout,
    root,
) -> int:
    from stagebot.stages.catalog import load_catalog
    from stagebot.stages.planner import plan_run

    catalog = load_catalog(catalog_path)
    changed = read_changed_files(changed_files)
    plan = plan_run(command, catalog, changed_files=changed, commit=commit, pr=pr, history=book)
    if dirty:
        plan = replace(
            plan,
            notes=[
                *plan.notes,
                f"the work tree differs from "
                f"{commit[:7]}: recorded as {commit}; only this exact "
                "state can reuse results",
            ],
        )
    stage_paths = {s.name: list(s.run_if_changed) for s in catalog.stages}
    number = book.start_pipeline(
        command=command.to_json(),
        commit=commit,
        plan=plan.to_json(),
        pr=pr,
        branch=branch,
        base_commit=base_commit,
        number=number,
        meta={"stage_paths": {s.stage: stage_paths[s.stage] for s in plan.shards}},
    )
    try:
        return _execute(
            book,
            number,
            plan,
            catalog,
            command,
            out_dir,
            cpu_slots,
            base_commit,
            base_ledger,
            shard_timeout,
            root,
        )
    except BaseException as error:
        _abort(book, number, error)
        raise


def _abort(book, number: int, error: BaseException) -> None:
    """Best effort after an error mid-run: the pipeline ends ABORTED, never stays RUNNING."""
    from stagebot.bot.ledger import busy_timeout_s, retry_busy

    why = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    try:
        retry_busy(
            lambda: book.finish_pipeline(number, "ABORTED", meta={"error": why}),
            patience_s=busy_timeout_s(),
        )
        click.echo(f"pipeline #{number} ended ABORTED: {why}", err=True)
    except Exception as failure:  # noqa: BLE001 - the original error is what the user sees
        click.echo(
            f"pipeline #{number} could not be marked ABORTED in {book.path} ({failure}); "
            f"it stopped because of {why}",
            err=True,
        )


def _execute(
    book,
    number,
    plan,
    catalog,
    command,
    out_dir,
    cpu_slots,
    base_commit,
    base_ledger,
    shard_timeout,
    root,
) -> int:
    from stagebot.bot.ledger import Ledger, retry_busy
    from stagebot.harness.executor import Settings, execute
    from stagebot.harness.report import (
        render_report,
        reply_completed,
        reply_triggered,
        report_from_record,
    )

    out = out_dir or Path("out") / f"pipeline-{number}"
    record = book.pipeline(number)
    click.echo(reply_triggered(report_from_record(record)), nl=False)
    options = command.run
    settings = Settings(
        out_dir=out,
        root=root,
        cpu_slots=cpu_slots,
        fail_fast=not options.disable_fail_fast,
        detailed_log=options.detailed_log,
        debug=options.debug,
        shard_timeout_s=shard_timeout,
    )
    execution = execute(plan, catalog, number, settings, ledger=book)
    base_book = Ledger.open(base_ledger, readonly=True) if base_ledger else book
    base = base_book.base_pipeline(
        base_commit, DEFAULT_BRANCH, exclude=number if base_book is book else None
    )
    base_outcomes = base_book.test_outcomes(base) if base is not None else None
    record = book.pipeline(number)
    report = report_from_record(
        record, base=base_outcomes, base_pipeline=base, cancelled=execution.cancelled
    )
    report.slots, report.host = execution.slots, execution.host
    retry_busy(
        lambda: book.finish_pipeline(
            number,
            report.analysis.state,
            meta={"slots": execution.slots, "host": execution.host, "base_pipeline": base},
        )
    )
    report.state = report.analysis.state
    out.mkdir(parents=True, exist_ok=True)
    markdown = render_report(report, "md")
    (out / "report.md").write_text(markdown)
    (out / "report.html").write_text(render_report(report, "html"))
    click.echo(markdown)
    click.echo(reply_completed(report), nl=False)
    click.echo(f"reports: {out / 'report.md'}, {out / 'report.html'}; ledger: {book.path}")
    return report.exit_code


def _reuse_pipeline(book, command, commit, pr, root) -> int:
    from stagebot.bot.worktree import changed_between

    if commit is None:
        raise click.UsageError("reuse-pipeline needs the head commit: give --commit SHA")
    validation = book.record_validation(commit, command.pipeline_id, pr=pr)
    if not validation.ok:
        click.echo(f"reuse-pipeline refused: {validation.reason}")
        return 1
    click.echo(
        f"PR_Github #{validation.pipeline} [ reuse-pipeline ] Reusing PR_Github "
        f"#{validation.source}. Commit: `{commit[:7]}`"
    )
    if validation.source_commit and validation.source_commit != commit:
        files = changed_between(root, validation.source_commit, commit)
        listing = (
            "unknown (git cannot compare them here)"
            if files is None
            else (", ".join(files) or "none")
        )
        click.echo(
            f"#{validation.source} ran on {validation.source_commit[:7]}, not "
            f"{commit[:7]}; files changed between them: {listing}"
        )
    return 0
