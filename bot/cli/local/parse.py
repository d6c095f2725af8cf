"""`bot parse` and `bot help`: what a comment asks for, and the command language's help."""

from __future__ import annotations

import json

import click

from stagebot.bot.cli.options import comment_argument, json_option, read_comment
from stagebot.bot.comments.grammar import help_text, near_miss, parse_comment
from stagebot.stages.errors import StagebotError
from stagebot.stages.suggest import unknown


@click.command()
@json_option
@comment_argument
def parse(as_json: bool, comment: str) -> None:
    """Parse COMMENT (a whole PR comment, or '-' for stdin) into a Command."""
    text = read_comment(comment)
    command = parse_comment(text)
    if as_json:
        click.echo(json.dumps(command.to_json(), indent=2))
    elif command.name is None:
        hint = near_miss(text)
        click.echo(
            "no /bot command in this comment (nothing to do)" + (f"; {hint}" if hint else "")
        )
    else:
        click.echo(f"command: {command.name} (line {command.line})")
        for key, value in command.options().items():
            if value not in (False, None, []):
                click.echo(f"  {key}: {value}")


@click.command("help")
@click.argument("name", required=False, metavar="[COMMAND]")
@click.pass_context
def help_command(ctx: click.Context, name: str | None) -> None:
    """Print the `/bot` command language's help (what `/bot help` replies); with COMMAND, that
    `bot` command's help (`bot help run` is `bot run --help`)."""
    if name is None:
        click.echo(help_text(), nl=False)
        return
    root = ctx.find_root()
    group = root.command
    if not isinstance(group, click.Group) or name not in group.list_commands(root):
        names = group.list_commands(root) if isinstance(group, click.Group) else []
        raise StagebotError(unknown("command", name, names, listing="`bot --help` lists them"))
    command = group.get_command(root, name)
    click.echo(command.get_help(click.Context(command, info_name=name, parent=root)))
