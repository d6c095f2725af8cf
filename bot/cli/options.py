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
