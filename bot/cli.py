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
    "parse": "stagebot.bot.cmd_parse:parse",
    "dry-run": "stagebot.bot.cmd_dry_run:dry_run",
    "stages": "stagebot.bot.cmd_stages:stages",
    "help": "stagebot.bot.cmd_parse:help_command",
    "kernels": "stagebot.bot.cmd_kernels:kernels",
    "handle-event": "stagebot.bot.cmd_handle_event:handle_event",
    "publish": "stagebot.bot.cmd_publish:publish",
    "run": "stagebot.bot.cmd_run:run",
    "run-stage": "stagebot.bot.cmd_run_stage:run_stage",
    "report": "stagebot.bot.cmd_report:report",
    "app-token": "stagebot.bot.cmd_app_token:app_token",
    "fetch-ledger": "stagebot.bot.cmd_fetch_ledger:fetch_ledger",
    "dispatch": "stagebot.bot.cmd_dispatch:dispatch",
    "report-run": "stagebot.bot.cmd_report_run:report_run",
    "gate": "stagebot.bot.cmd_gate:gate",
}


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
@click.version_option(package_name="stagebot")
def cli() -> None:
    """stagebot: turn `/bot` PR comments into stage plans, run them, report back."""


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI; a project error prints one line and exits with its code, any
    other exception its traceback and exit 3."""
    try:
        cli.main(args=argv, prog_name="bot", standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
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
