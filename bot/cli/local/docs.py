"""`bot docs reference`: write (or check) docs/reference.md from the commands' declarations."""

from __future__ import annotations

from pathlib import Path

import click

from stagebot.stages.errors import StagebotError

# The checkout stagebot runs from (an editable install): bot/ sits at its top.
CHECKOUT = Path(__file__).resolve().parents[3]
REFERENCE = Path("docs") / "reference.md"


@click.group("docs")
def docs() -> None:
    """stagebot's own documentation: the generated parts."""


@docs.command("reference")
@click.option("--check", is_flag=True, help="Fail if the committed file is stale; write nothing.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"The file to write or check (default: {REFERENCE} of the checkout stagebot runs from).",
)
def reference(check: bool, out: Path | None) -> None:
    """Render the `bot` commands and the `/bot` language into Markdown (docs/reference.md)."""
    from stagebot.bot.cli.reference import render, stale

    path = out or _default_path()
    committed = path.read_text(encoding="utf-8") if path.exists() else ""
    current = render()
    problem = stale(committed, current)
    if check and problem:
        raise click.ClickException(f"{path} is stale: {problem}")
    if problem:
        path.write_text(current, encoding="utf-8")
    click.echo(f"{path}: {'rewritten' if problem and not check else 'current'}")


def _default_path() -> Path:
    if not (CHECKOUT / "pyproject.toml").is_file():
        raise StagebotError(
            f"stagebot runs from an installed package ({CHECKOUT}), not a checkout, so there is "
            f"no {REFERENCE} to write: give --out PATH"
        )
    return CHECKOUT / REFERENCE
