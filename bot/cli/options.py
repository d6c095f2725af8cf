"""CLI arguments and options shared by several subcommands, each defined once."""

from __future__ import annotations

import sys
from pathlib import Path

import click

comment_argument = click.argument("comment", metavar="COMMENT")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON (the contract).")
catalog_option = click.option(
    "--catalog",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Catalog folder of fragments or one YAML file (default: the shipped catalog).",
)


def _discovered_catalog(ctx, param, value: Path | None) -> Path | None:
    """The catalog given, else the one the repository's `.github/stagebot-init.yml` names (the
    nearest one at or above the current folder); None only in stagebot's own repository."""
    if value is not None:
        return value
    from stagebot.bot.adopt.workflows import discover_catalog

    return discover_catalog(Path.cwd())


# The commands for this machine find the repository's catalog themselves (bot/adopt/workflows.py).
local_catalog_option = click.option(
    "--catalog",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    callback=_discovered_catalog,
    help="Catalog folder of fragments or one YAML file (default: the `catalog:` of the nearest "
    ".github/stagebot-init.yml at or above this folder; stagebot's own repository: the shipped "
    "catalog).",
)
changed_files_option = click.option(
    "--changed-files",
    type=click.File("r"),
    default=None,
    help="File listing the PR's changed paths, one per line ('-': stdin). Absent: unknown, "
    "treated as 'everything changed'.",
)
commit_option = click.option("--commit", default=None, help="The pinned commit SHA.")
pr_option = click.option("--pr", type=click.IntRange(min=1), default=None, help="PR number.")


def read_comment(comment: str) -> str:
    """The COMMENT argument: the text itself, or '-' to read it from stdin."""
    return sys.stdin.read() if comment == "-" else comment


def read_changed_files(stream) -> list[str] | None:
    if stream is None:
        return None
    return [line.strip() for line in stream.read().splitlines() if line.strip()]
