"""`bot parse` and `bot help`: what a comment asks for, and the command language's help."""

from __future__ import annotations

import json

import click

from stagebot.bot.cli_options import comment_argument, json_option, read_comment
from stagebot.bot.grammar import help_text, parse_comment


@click.command()
@json_option
@comment_argument
def parse(as_json: bool, comment: str) -> None:
    """Parse COMMENT (a whole PR comment, or '-' for stdin) into a Command."""
    command = parse_comment(read_comment(comment))
    if as_json:
        click.echo(json.dumps(command.to_json(), indent=2))
    elif command.name is None:
        click.echo("no /bot command in this comment (nothing to do)")
    else:
        click.echo(f"command: {command.name} (line {command.line})")
        for key, value in command.options().items():
            if value not in (False, None, []):
                click.echo(f"  {key}: {value}")


@click.command("help")
def help_command() -> None:
    """Print the `/bot` command language's help (what `/bot help` replies)."""
    click.echo(help_text(), nl=False)
