"""The `bot` console script: a tiny root group whose subcommands load lazily from a table.

Each entry maps a subcommand name to ``"module:attribute"`` (a click command). Later work adds a
line here, never edits another command's module; nothing heavy is imported until a subcommand
runs, so `bot parse` and `bot dry-run` start fast.
"""

from __future__ import annotations

import importlib
import sys
import traceback

import click

from stagebot.stages.errors import StagebotError
from stagebot.stages.suggest import unknown

# An exception nobody caught is stagebot's own failure, not the tests': 3, never 1 (a test failed).
INTERNAL_ERROR_EXIT = 3

COMMANDS: dict[str, str] = {
    "parse": "stagebot.bot.cli.local.parse:parse",
    "dry-run": "stagebot.bot.cli.local.dry_run:dry_run",
    "stages": "stagebot.bot.cli.local.stages:stages",
    "help": "stagebot.bot.cli.local.parse:help_command",
    "kernels": "stagebot.bot.cli.local.kernels:kernels",
    "handle-event": "stagebot.bot.cli.workflow.handle_event:handle_event",
    "publish": "stagebot.bot.cli.workflow.publish:publish",
    "run": "stagebot.bot.cli.local.run:run",
    "run-stage": "stagebot.bot.cli.local.run_stage:run_stage",
    "stage-setup": "stagebot.bot.cli.workflow.stage_setup:stage_setup",
    "report": "stagebot.bot.cli.local.report:report",
    "app-token": "stagebot.bot.cli.workflow.app_token:app_token",
    "fetch-ledger": "stagebot.bot.cli.workflow.fetch_ledger:fetch_ledger",
    "dispatch": "stagebot.bot.cli.workflow.dispatch:dispatch",
    "report-run": "stagebot.bot.cli.workflow.report_run:report_run",
    "gate": "stagebot.bot.cli.workflow.gate:gate",
    "docs": "stagebot.bot.cli.local.docs:docs",
    "init": "stagebot.bot.cli.local.init:init",
    "doctor": "stagebot.bot.cli.local.doctor:doctor",
    "audit-reuse": "stagebot.bot.cli.local.audit_reuse:audit_reuse",
}

# `bot --help`: every command in one section, with its whole one-line description (written here,
# so the root help imports none of them). tests/bot/cli/test_cli_help.py checks it against COMMANDS.
SECTIONS: tuple[tuple[str, dict[str, str]], ...] = (
    (
        "Commands for this machine",
        {
            "run": "Plan a /bot comment with the ledger as history, run its stages here, print "
            "the report.",
            "dry-run": "Show the plan of a /bot comment: every shard, its action and why.",
            "parse": "Show the /bot command a PR comment holds.",
            "stages": "Show the stage catalog, one stage, or which stages run a test.",
            "audit-reuse": "Run a sample of the tests a pipeline reused by key; record faults.",
            "report": "Render a recorded pipeline's report (markdown, HTML or JSON).",
            "run-stage": "Run one shard from a matrix entry, without a ledger (one CI job).",
            "kernels": "Compile the CuTe DSL kernels ahead of time (needs the [kernels] extra).",
            "help": "Show the /bot command language; `bot help COMMAND`: that command's help.",
            "docs": "Write stagebot's command reference (docs/reference.md) from the commands.",
            "init": "Adopt stagebot here: settings, catalog, workflows (a diff unless --write).",
            "doctor": "Check this repository and its GitHub setup for the bot, each with its fix.",
        },
    ),
    (
        "Commands the bot's GitHub workflows run",
        {
            "handle-event": "Answer a /bot comment: authorize, plan, reply, set a pending status.",
            "gate": "Refuse a comment not for the bot, or over its commenter's rate limit, "
            "before any App token is minted.",
            "fetch-ledger": "Download the ledger the bot's newest reply vouches for.",
            "dispatch": "Start the stage workflow for a planned pipeline.",
            "stage-setup": "Install what a matrix entry's stage declares (extras, commands, env).",
            "report-run": "Check a finished stage run, then publish its report.",
            "publish": "Record StageResults, post the report into the reply, set the status.",
            "app-token": "Mint the bot's GitHub App token for a job.",
        },
    ),
)


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when that subcommand is used."""

    def __init__(self, *args, lazy_commands: dict[str, str], **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def resolve_command(self, ctx: click.Context, args: list[str]):
        """An unknown subcommand is one error line with the close matches, not the usage."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in self.list_commands(ctx):
            raise StagebotError(
                unknown("command", name, self.list_commands(ctx), listing="`bot --help` lists them")
            )
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands by section, each with its whole description (SECTIONS)."""
        for title, described in SECTIONS:
            with formatter.section(title):
                formatter.write_dl(list(described.items()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy_commands:
            return super().get_command(ctx, cmd_name)
        module_name, attribute = self.lazy_commands[cmd_name].split(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy_commands[cmd_name]} is not a click command")
        return command


@click.group(
    cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, _, value: _print_version(ctx) if value else None,
    help="Show the version (and the commit, when run from a checkout) and exit.",
)
def cli() -> None:
    """stagebot: turn `/bot` PR comments into stage plans, run them, report back."""


def _print_version(ctx: click.Context) -> None:
    click.echo(version_text())
    ctx.exit()


def version_text() -> str:
    """``bot, version 0.1.0``, plus ``(commit b300820 of the checkout /src/stagebot)`` when
    stagebot runs from a git checkout (an editable install), ``-dirty`` for local changes."""
    import subprocess
    from importlib.metadata import version
    from pathlib import Path

    text = f"bot, version {version('stagebot')}"
    checkout = Path(__file__).resolve().parents[2]
    if not (checkout / ".git").exists():
        return text
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=7"],
            cwd=checkout,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return text
    return f"{text} (commit {described} of the checkout {checkout})"


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI; a project error prints one line and exits with its code, any
    other exception its traceback and exit 3."""
    try:
        cli.main(args=argv, prog_name="bot", standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except BrokenPipeError:  # the reader of stdout went away (`bot … | head -1`): stop quietly
        from stagebot.bot.cli.output import stdout_closed

        stdout_closed()
        sys.exit(1)
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except StagebotError as error:
        click.echo(f"Error: {error}", err=True)
        sys.exit(error.exit_code)
    except Exception:  # noqa: BLE001 - the edge: a bug in stagebot, reported as such
        traceback.print_exc()
        click.echo(f"Error: stagebot failed unexpectedly (exit {INTERNAL_ERROR_EXIT})", err=True)
        sys.exit(INTERNAL_ERROR_EXIT)
