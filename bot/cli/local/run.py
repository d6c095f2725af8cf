"""`bot run`: plan a comment with the ledger as history, run it on this host, report, exit.

Exit codes: 0 SUCCESS; 1 a NEW / PRE-EXISTING / UNCLASSIFIED failure, or the run was cancelled
(ABORTED); 3 only infrastructure failures, or the ledger or --out is unusable (nothing ran then);
4 a shard could not run on this host and nothing failed (NOT_RUN, as the bot's reply says it);
2 a usage error (a pipeline the ledger lacks included). `/bot reuse-pipeline [N]` records that
the commit is validated by N. A closed stdout stops the output, never the pipeline.
"""

from __future__ import annotations

import sys
import tempfile
from functools import partial
from pathlib import Path

import click

from stagebot.bot.cli.options import (
    changed_files_option,
    comment_argument,
    commit_option,
    json_option,
    local_catalog_option,
    pr_option,
    read_changed_files,
    read_comment,
)
from stagebot.bot.cli.output import quiet_when_closed
from stagebot.bot.cli.run_options import (
    base_ledger_option,
    ledger_option,
    out_option,
    pipeline_option,
    root_option,
    shard_timeout_option,
)
from stagebot.harness.ledger.location import (
    FORMER_LEDGER,
    default_ledger,
    default_out_folder,
    is_former_ledger,
    state_folder,
)
from stagebot.stages.errors import StagebotError

DEFAULT_BRANCH = "main"


@click.command("run")
@local_catalog_option
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
    from stagebot.harness.pipeline.local import RunRequest, Terminal, run_local
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
    home = repository_root(Path.cwd())  # the repository whose ledger is the default
    ledger_path = ledger or default_ledger(home)
    if ledger is None:
        make_output_folder(ledger_path.parent)
        _warn_former(ledger_path, home)
    _writable_folder(ledger_path.parent, "--ledger's folder")
    dirty = False
    if commit is None:  # stagebot's own outputs are not changes of the tree
        commit, dirty = tree_identity(root, outputs=(ledger_path, *filter(None, [out_dir])))
    with Ledger.open(ledger_path) as book:
        # the ledger is usable: nothing ran yet
        _writable_folder(out_dir or default_out_folder(home, ledger_path, 1).parent, "--out")
        named = command.pipeline_id if command.name == "reuse-pipeline" else command.run.reuse_test
        if isinstance(named, int):  # a pipeline that does not exist is a usage error
            book.require_pipeline(named)
        if command.name == "reuse-pipeline":
            code = _reuse_pipeline(book, command, commit, pr, root)
        else:
            request = RunRequest(
                catalog_path=catalog,
                changed_files=read_changed_files(changed_files),
                commit=commit,
                dirty=dirty,
                pr=pr,
                out_dir=out_dir,
                cpu_slots=cpu_slots,
                base_commit=base_commit,
                branch=branch,
                base_ledger=base_ledger,
                number=number,
                shard_timeout=shard_timeout,
                root=root,
                home=home,
                default_branch=DEFAULT_BRANCH,
                rerun_options=_given_options(click.get_current_context()),
            )
            said = sys.stderr if as_json else sys.stdout
            terminal = Terminal(  # with --json, stdout is the JSON alone
                # a closed pipe (`bot run … | head -1`) stops the output, never the pipeline
                say=quiet_when_closed(partial(click.echo, nl=False, err=as_json), said),
                warn=quiet_when_closed(partial(click.echo, nl=False, err=True), sys.stderr),
                report_json=(
                    quiet_when_closed(partial(click.echo, nl=False), sys.stdout)
                    if as_json
                    else None
                ),
            )
            code = run_local(command, book, request, terminal)
    sys.exit(code)


# The options a re-run needs as given to find the same catalog, history and shards (not --out:
# a new pipeline writes its own folder; not --json: how it is shown).
RERUN = ("catalog", "ledger", "base_ledger", "root", "commit", "pr", "base_commit", "branch")
RERUN += ("cpu_slots", "shard_timeout")


def _given_options(ctx: click.Context) -> tuple[str, ...]:
    """The options of RERUN given on the command line, as words of a command to paste
    (paths absolute: it works from any folder)."""
    words = []
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name)
        if param.name not in RERUN or source != click.core.ParameterSource.COMMANDLINE:
            continue
        value = ctx.params[param.name]
        words += [param.opts[0], str(value.resolve() if isinstance(value, Path) else value)]
    return tuple(words)


def _warn_former(ledger: Path, home: Path) -> None:
    """The default ledger is the one an older stagebot kept inside the repository (found there,
    so its history is kept): say how to move it out of the tested code's reach."""
    if is_former_ledger(home, ledger):
        moved = state_folder(home) / FORMER_LEDGER.name
        click.echo(
            f"ledger: {ledger} (the former default, inside the repository, where the code under "
            f"test can delete it; move it out: mkdir -p {moved.parent} && mv {ledger} {moved})",
            err=True,
        )


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
