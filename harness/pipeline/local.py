"""A pipeline on this host, start to finish (`bot run`): one call, ``run_local``.

Below it, in order: the base the failures will be compared with (checked before anything runs),
the plan with the ledger as history, the pipeline started, the base chosen, its shards run here,
the pipeline finished and its reports written. The base is chosen before the shards run: each
shard's NEW failures are said the moment it ends, and they decide fail-fast (fail_fast.py). What
it says goes through a ``Terminal``.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from stagebot.harness.ledger.book import Ledger
from stagebot.harness.ledger.location import default_out_folder
from stagebot.harness.pipeline.base import base_target, local_base
from stagebot.harness.pipeline.fail_fast import condemner
from stagebot.harness.pipeline.lifecycle import abort, finish, start, write_reports
from stagebot.harness.pipeline.worktree import make_output_folder
from stagebot.harness.report import (
    plain_text,
    render_report,
    reply_completed,
    reply_triggered,
    report_from_record,
)
from stagebot.harness.reuse.offers import environment_change_here
from stagebot.harness.run.executor import Settings, execute
from stagebot.stages.catalog import load_catalog
from stagebot.stages.command import Command
from stagebot.stages.planner import plan_run

NOTHING_RAN_EXIT = 4  # as a NOT_RUN pipeline's


@dataclass(frozen=True)
class RunRequest:
    """What `bot run` was asked, besides the command and the ledger."""

    catalog_path: Path | None
    changed_files: list[str] | None
    commit: str | None
    dirty: bool
    pr: int | None
    out_dir: Path | None  # None: default_out_folder (harness/ledger/location.py)
    cpu_slots: int
    base_commit: str | None  # as given: any unambiguous prefix (resolved before anything runs)
    branch: str | None
    base_ledger: Path | None
    number: int | None
    shard_timeout: float | None
    root: Path
    home: Path  # the repository root of the current folder: the default out/ is there
    default_branch: str
    rerun_options: tuple[str, ...] = ()  # what its re-run must repeat (the report's hints)


@dataclass(frozen=True)
class Terminal:
    """Where a local run speaks, each text written as it is: ``say`` the run and its report,
    ``warn`` why nothing ran or why the run stopped, ``report_json`` (only when asked for) the
    report as JSON."""

    say: Callable[[str], None]
    warn: Callable[[str], None]
    report_json: Callable[[str], None] | None = None


def run_local(command: Command, book: Ledger, request: RunRequest, terminal: Terminal) -> int:
    """Plan ``command`` with ``book`` as history, run it here, report; the exit code."""
    base_commit, base_how = _base_target(book, request)
    commit = request.commit
    catalog = load_catalog(request.catalog_path)
    plan = plan_run(
        command,
        catalog,
        changed_files=request.changed_files,
        commit=commit,
        pr=request.pr,
        history=book,
        environment_change=environment_change_here(),
    )
    if not plan.shards:  # said plainly, and nothing is recorded: there is no pipeline to report
        emptied = next(note for note in plan.notes if note.startswith("no stage is selected"))
        terminal.warn(f"nothing ran: {emptied}\n")
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
        base_commit=base_commit,
        number=request.number,
        meta={
            "triggered_by": _os_user(),
            "local": True,  # the reports speak of this machine, not of a PR
            "rerun_options": list(request.rerun_options),
        },
    )
    try:
        return _execute(
            book, number, plan, catalog, command, request, (base_commit, base_how), terminal
        )
    except BaseException as error:
        terminal.warn(abort(book, number, error) + "\n")
        raise


def _base_target(book: Ledger, request: RunRequest) -> tuple[str | None, str]:
    """(the commit failures are compared with, how it was found), from ``--base-ledger`` when
    given: checked before anything runs."""
    if request.base_ledger is None:
        return base_target(
            book, request.base_commit, request.commit, request.root, request.default_branch
        )
    with Ledger.open(request.base_ledger, readonly=True) as base_book:
        return base_target(
            base_book, request.base_commit, request.commit, request.root, request.default_branch
        )


def _os_user() -> str:
    """Who started this local run (the OS user), as the reports say it."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a bare container)
        return "an unknown user"


def _execute(
    book: Ledger,
    number: int,
    plan,
    catalog,
    command: Command,
    request: RunRequest,
    base_target: tuple[str | None, str],
    terminal: Terminal,
) -> int:
    out = request.out_dir or default_out_folder(request.home, book.path, number)
    make_output_folder(out)
    record = book.pipeline(number)
    terminal.say(plain_text(reply_triggered(report_from_record(record))))
    options = command.run
    wanted, how = base_target
    with ExitStack() as stack:
        base_book = (
            stack.enter_context(Ledger.open(request.base_ledger, readonly=True))
            if request.base_ledger
            else None
        )
        base, base_note = local_base(
            book,
            base_book=base_book,
            wanted=wanted,
            how=how,
            default_branch=request.default_branch,
            exclude=number,
        )
    settings = Settings(
        out_dir=out,
        root=request.root,
        cpu_slots=request.cpu_slots,
        fail_fast=not options.disable_fail_fast,
        detailed_log=options.detailed_log,
        debug=options.debug,
        shard_timeout_s=request.shard_timeout,
        condemns=condemner(
            terminal.say,
            base=base,
            changed_files=plan.changed_files,
            stage_paths=(record.meta or {}).get("stage_paths"),
            root=request.root,
        ),
    )
    execution = execute(plan, catalog, number, settings, ledger=book)
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
    terminal.say(render_report(report, "text") + "\n")  # the markdown file stays GitHub's
    terminal.say(plain_text(reply_completed(report)))
    terminal.say(f"reports: {out / 'report.md'}, {out / 'report.html'}; ledger: {book.path}\n")
    if terminal.report_json is not None:
        terminal.report_json(render_report(report, "json"))
    return report.exit_code
