"""`bot run`: plan a comment with the ledger as history, run it on this host, report, exit.

Exit codes: 0 SUCCESS; 1 a NEW / PRE-EXISTING / UNCLASSIFIED failure, or the run was cancelled
(ABORTED); 3 only infrastructure failures, or the ledger or --out is unusable (nothing ran then);
4 nothing ran (NOT_RUN: no shard could run on this host); 2 a usage error (a pipeline the
ledger lacks included). `/bot reuse-pipeline [N]` records that the commit is validated by N.
"""

from __future__ import annotations

import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import click

from stagebot.bot.cli.options import (
    catalog_option,
    changed_files_option,
    comment_argument,
    commit_option,
    json_option,
    pr_option,
    read_changed_files,
    read_comment,
)
from stagebot.bot.cli.run_options import (
    base_ledger_option,
    default_ledger,
    default_out,
    ledger_option,
    out_option,
    pipeline_option,
    root_option,
    shard_timeout_option,
)
from stagebot.stages.errors import StagebotError

DEFAULT_BRANCH = "main"
NOTHING_RAN_EXIT = 4  # as a NOT_RUN pipeline's


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
@base_ledger_option
@pipeline_option("Use this pipeline number (in Actions: the workflow run number).")
@shard_timeout_option
@root_option
@json_option
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
    as_json,
    comment,
) -> None:
    """Plan COMMENT (or '-' for stdin) and run it here; print the report (with --json: the
    report as JSON on stdout, the rest on stderr)."""
    from stagebot.bot.comments.grammar import near_miss, parse_comment
    from stagebot.harness.ledger.book import Ledger
    from stagebot.harness.pipeline.worktree import (
        make_output_folder,
        repository_root,
        tree_identity,
    )
    from stagebot.stages.errors import CommandError

    text = read_comment(comment)
    command = parse_comment(text)
    if command.name is None and (hint := near_miss(text)):
        raise CommandError(hint)
    if command.name not in ("run", "reuse-pipeline"):
        what = "no /bot command" if command.name is None else f"`/bot {command.name}`"
        click.echo(
            f"{what}: nothing to run here (`bot run` runs `/bot run` and records "
            "`/bot reuse-pipeline`)"
        )
        return
    home = repository_root(Path.cwd())  # the default ledger and out/ live there
    ledger_path = ledger or default_ledger(home)
    if ledger is None:
        make_output_folder(ledger_path.parent)
    _writable_folder(ledger_path.parent, "--ledger's folder")
    dirty = False
    if commit is None:  # stagebot's own outputs are not changes of the tree
        commit, dirty = tree_identity(root, outputs=(ledger_path, out_dir or home / "out"))
    with Ledger.open(ledger_path) as book:
        _writable_folder(out_dir or home / "out", "--out")  # the ledger is usable: nothing ran yet
        named = command.pipeline_id if command.name == "reuse-pipeline" else command.run.reuse_test
        if isinstance(named, int):  # a pipeline that does not exist is a usage error
            book.require_pipeline(named)
        if command.name == "reuse-pipeline":
            code = _reuse_pipeline(book, command, commit, pr, root)
        else:
            base_commit, base_how = _base_target(book, base_ledger, base_commit, commit, root)
            request = RunRequest(
                catalog_path=catalog,
                changed_files=changed_files,
                commit=commit,
                dirty=dirty,
                pr=pr,
                out_dir=out_dir,
                cpu_slots=cpu_slots,
                base_commit=base_commit,
                base_how=base_how,
                branch=branch,
                base_ledger=base_ledger,
                number=number,
                shard_timeout=shard_timeout,
                root=root,
                home=home,
                as_json=as_json,
            )
            code = _run(command, book, request)
    sys.exit(code)


def _base_target(book, base_ledger, base_commit, commit, root):
    """The commit this run compares with, found before anything runs (a --base-commit that
    names no commit, or more than one, is an error): bot.base.base_target."""
    from stagebot.harness.ledger.book import Ledger
    from stagebot.harness.pipeline.base import base_target

    if base_ledger is None:
        return base_target(book, base_commit, commit, root, DEFAULT_BRANCH)
    with Ledger.open(base_ledger, readonly=True) as base_book:
        return base_target(base_book, base_commit, commit, root, DEFAULT_BRANCH)


class OutputError(StagebotError):
    """A folder `bot run` must write cannot be created or written: nothing ran or was recorded."""

    exit_code = 3


def _writable_folder(folder: Path, what: str) -> None:
    """Create ``folder`` and check that files can be written in it, before anything is recorded."""
    from stagebot.harness.pipeline.worktree import make_output_folder

    try:
        make_output_folder(folder)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise OutputError(
            f"{what} {folder} cannot be {'written' if folder.is_dir() else 'created'} "
            f"({error.strerror or error}); give a folder you can write to"
        ) from None


@dataclass(frozen=True)
class RunRequest:
    """What `bot run` was asked, besides the command and the ledger."""

    catalog_path: Path | None
    changed_files: str | None
    commit: str | None
    dirty: bool
    pr: int | None
    out_dir: Path | None
    cpu_slots: int
    base_commit: str | None  # resolved: a full SHA (or a commit the ledger records)
    base_how: str  # how base_commit was found (the report names it)
    branch: str | None
    base_ledger: Path | None
    number: int | None
    shard_timeout: float | None
    root: Path
    home: Path  # the repository root of the current folder: the default out/ is there
    as_json: bool = False  # stdout: only the JSON report


def _run(command, book, request: RunRequest) -> int:
    from stagebot.harness.pipeline.lifecycle import abort, start
    from stagebot.stages.catalog import load_catalog
    from stagebot.stages.planner import plan_run

    commit = request.commit
    catalog = load_catalog(request.catalog_path)
    changed = read_changed_files(request.changed_files)
    plan = plan_run(
        command, catalog, changed_files=changed, commit=commit, pr=request.pr, history=book
    )
    if not plan.shards:  # said plainly, and nothing is recorded: there is no pipeline to report
        emptied = next(note for note in plan.notes if note.startswith("no stage is selected"))
        click.echo(f"nothing ran: {emptied}", err=True)
        return NOTHING_RAN_EXIT
    if request.dirty:
        plan = replace(
            plan,
            notes=[
                *plan.notes,
                f"the work tree differs from "
                f"{commit[:7]}: recorded as {commit}; only this exact "
                "state can reuse results",
            ],
        )
    number = start(
        book,
        plan,
        catalog=catalog,
        branch=request.branch,
        base_commit=request.base_commit,
        number=request.number,
        meta={
            "triggered_by": _os_user(),
            "local": True,  # the reports speak of this machine, not of a PR
        },
    )
    try:
        return _execute(book, number, plan, catalog, command, request)
    except BaseException as error:
        click.echo(abort(book, number, error), err=True)
        raise


def _os_user() -> str:
    """Who started this local run (the OS user), as the reports say it."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a bare container)
        return "an unknown user"


def _execute(book, number: int, plan, catalog, command, request: RunRequest) -> int:
    from stagebot.harness.ledger.book import Ledger
    from stagebot.harness.pipeline.base import local_base
    from stagebot.harness.pipeline.lifecycle import finish, write_reports
    from stagebot.harness.pipeline.worktree import make_output_folder
    from stagebot.harness.report import (
        plain_text,
        render_report,
        reply_completed,
        reply_triggered,
        report_from_record,
    )
    from stagebot.harness.run.executor import Settings, execute

    out = request.out_dir or default_out(request.home, number)
    make_output_folder(out)
    record = book.pipeline(number)
    say = partial(click.echo, err=request.as_json)  # with --json, stdout is the JSON alone
    say(plain_text(reply_triggered(report_from_record(record))), nl=False)
    options = command.run
    settings = Settings(
        out_dir=out,
        root=request.root,
        cpu_slots=request.cpu_slots,
        fail_fast=not options.disable_fail_fast,
        detailed_log=options.detailed_log,
        debug=options.debug,
        shard_timeout_s=request.shard_timeout,
    )
    execution = execute(plan, catalog, number, settings, ledger=book)
    with ExitStack() as stack:
        base_book = (
            stack.enter_context(Ledger.open(request.base_ledger, readonly=True))
            if request.base_ledger
            else book
        )
        base, base_note = local_base(
            book,
            base_book=base_book if base_book is not book else None,
            wanted=request.base_commit,
            how=request.base_how,
            default_branch=DEFAULT_BRANCH,
            exclude=number,
        )
    report = finish(
        book,
        number,
        base=base,
        cancelled=execution.cancelled,
        meta={"slots": execution.slots, "host": execution.host},
        root=request.root,
    )
    report.ledger, report.base_note = str(book.path), base_note
    write_reports(report, out)
    say(render_report(report, "text"))  # the terminal's: the markdown file stays GitHub's
    say(plain_text(reply_completed(report)), nl=False)
    say(f"reports: {out / 'report.md'}, {out / 'report.html'}; ledger: {book.path}")
    if request.as_json:
        click.echo(render_report(report, "json"), nl=False)
    return report.exit_code


def _reuse_pipeline(book, command, commit, pr, root) -> int:
    from stagebot.harness.pipeline.worktree import changed_between
    from stagebot.harness.reuse.policy import record_validation

    if commit is None:
        raise click.UsageError("reuse-pipeline needs the head commit: give --commit SHA")
    validation = record_validation(book, commit, command.pipeline_id, pr=pr)
    if not validation.ok:
        click.echo(f"reuse-pipeline refused: {validation.reason}")
        return 1
    click.echo(
        f"pipeline #{validation.pipeline} [ reuse-pipeline ] reuses pipeline "
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
