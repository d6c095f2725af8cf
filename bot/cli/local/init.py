"""`bot init`: adopt stagebot in this repository, or check that its generated files are current.

Without ``--write`` nothing changes: it prints each file's state and diff, and exits 1 when a
file would change (so CI can run it as a staleness check), 0 when all are current. With
``--write`` it writes them and prints what to set up on GitHub next.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command("init")
@click.option("--write", is_flag=True, help="Write the files (default: show the diff only).")
@click.option(
    "--stagebot-wheel",
    type=click.Path(path_type=Path),
    default=None,
    help="The stagebot release wheel to pin (its version and sha256) in the workflows.",
)
@click.option(
    "--local-wheel",
    is_flag=True,
    help="Install that very wheel file in the workflows (tests, mirrors), not stagebot==VERSION.",
)
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The repository (default: the git work tree's top folder holding this one).",
)
def init(write: bool, stagebot_wheel: Path | None, local_wheel: bool, root: Path) -> None:
    """Write stagebot's settings, catalog and workflows here; show a diff if they exist."""
    from stagebot.bot.adopt.adoption import next_steps, pin_wheel, plan_files

    if root is None:
        from stagebot.harness.pipeline.worktree import repository_root

        root = repository_root(Path.cwd())
    pin = pin_wheel(stagebot_wheel, local_wheel) if stagebot_wheel else None
    changes = plan_files(root, pin)
    pending = [change for change in changes if change.state != "unchanged"]
    for change in changes:
        click.echo(f"{change.state:9} {change.path}")
    if not write:
        for change in pending:
            click.echo(change.diff(), nl=False)
        _say_needs(root)
        if pending:
            click.echo(f"{len(pending)} file(s) would change: run `bot init --write` to write them")
            sys.exit(1)
        click.echo("everything is up to date")
        return
    for change in pending:
        path = root / change.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(change.new, encoding="utf-8")
    click.echo(f"wrote {len(pending)} file(s)")
    _say_needs(root)
    click.echo(next_steps(root))


def _say_needs(root: Path) -> None:
    """What the stage jobs would lack (bot/adopt/needs.py): `bot doctor` fails until it is added."""
    from stagebot.bot.adopt.adoption import needs_notes

    for note in needs_notes(root):
        click.echo(f"to add: {note}")
