"""Options shared by the commands that plan, run and report: run, dry-run, run-stage, stage-setup
and report."""

from __future__ import annotations

import json
from pathlib import Path

import click


def _root_default(ctx, param, value: Path | None) -> Path:
    from stagebot.harness.pipeline.worktree import repository_root

    return value if value is not None else repository_root(Path.cwd())


ledger_option = click.option(
    "--ledger",
    type=click.Path(path_type=Path),  # the ledger checks the path itself (unusable: exit 3)
    default=None,
    help="The pipeline ledger (SQLite). Default: the repository's, outside it: "
    "$XDG_STATE_HOME/stagebot/<repository>-<digest>/ledger.sqlite (out/ledger.sqlite where an "
    "older stagebot left one); `bot run` prints where.",
)
base_ledger_option = click.option(
    "--base-ledger",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A second, read-only ledger holding the base pipelines.",
)


def pipeline_option(help: str):  # noqa: A002 - click's own word
    """``--pipeline N`` (a positive number, the parameter ``number``)."""
    return click.option("--pipeline", "number", type=click.IntRange(min=1), default=None, help=help)


out_option = click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path, resolve_path=True),
    default=None,
    help="Output folder: one folder per shard (result.json, junit.xml, tests.jsonl, log.txt). "
    "Default: outside the repository, out of the tested code's reach, under "
    "$XDG_STATE_HOME/stagebot/<repository>-<digest>/ (`bot run` and `bot run-stage` print where).",
)
shard_timeout_option = click.option(
    "--shard-timeout",
    type=click.FloatRange(min=1),
    default=None,
    metavar="SECONDS",
    help="Every shard's timeout in SECONDS instead of the catalog's timeout_minutes: higher "
    "(a loaded machine) or lower.",
)
root_option = click.option(
    "--root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    callback=_root_default,
    help="Repository root: the working directory of every shard (suite paths are relative). "
    "Default: the git work tree's top folder (from any subfolder), else the current folder.",
)


entry_option = click.option(
    "--entry",
    "entry_arg",
    required=True,
    metavar="FILE|JSON",
    help="The matrix entry: a JSON file, or the JSON text itself.",
)


def load_entry(arg: str):
    """The MatrixEntry that ``--entry`` names: a JSON file, or the JSON text itself."""
    from stagebot.stages.errors import PlanError
    from stagebot.stages.plan import MatrixEntry

    path = Path(arg)
    text = (
        path.read_text(encoding="utf-8")
        if not arg.lstrip().startswith("{") and path.is_file()
        else arg
    )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise PlanError(
            f"--entry: neither a JSON file nor JSON text ({error}); give the "
            "matrix entry's file or its JSON"
        ) from None
    return MatrixEntry.from_json(data)
