"""`bot dry-run`: show exactly what `bot run` would do for a comment, without running anything."""

from __future__ import annotations

import json
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
from stagebot.bot.cli.run_options import ledger_option
from stagebot.bot.comments.grammar import near_miss, parse_comment
from stagebot.harness.ledger.location import default_ledger
from stagebot.harness.pipeline.worktree import repository_root, tree_identity
from stagebot.stages.catalog import load_catalog
from stagebot.stages.errors import CommandError
from stagebot.stages.plan import Plan
from stagebot.stages.planner import plan_run


@click.command("dry-run")
@json_option
@local_catalog_option
@changed_files_option
@commit_option
@pr_option
@ledger_option
@comment_argument
def dry_run(as_json, catalog, changed_files, commit, pr, ledger, comment) -> None:
    """Plan COMMENT (or '-' for stdin) against the catalog and print the plan.

    With a ledger (--ledger, else `bot run`'s default ledger when it exists; opened read-only),
    earlier pipelines count as `bot run` would count them (reuse included); the commit defaults
    to this work tree's identity then, as in `bot run`.
    """
    text = read_comment(comment)
    command = parse_comment(text)
    if command.name is None and (hint := near_miss(text)):
        raise CommandError(hint)
    if command.name != "run":
        what = "no /bot command" if command.name is None else f"`/bot {command.name}`"
        click.echo(f"{what}: nothing to plan (only `/bot run` runs stages)")
        return
    history = environment_change = None
    root = repository_root(Path.cwd())
    if ledger is None and default_ledger(root).exists():
        ledger = default_ledger(root)  # what `bot run` without --ledger reads
    if ledger is not None:  # the machine that plans runs the shards, as in `bot run`
        from stagebot.harness.ledger.book import Ledger
        from stagebot.harness.reuse.offers import environment_change_here

        environment_change = environment_change_here()
        if commit is None:
            commit, _ = tree_identity(root, outputs=(ledger,))
        # A ledger `bot run` has not created yet holds no history: everything would run.
        history = Ledger.open(ledger, readonly=True) if ledger.exists() else None
    try:
        plan = plan_run(
            command,
            load_catalog(catalog),
            changed_files=read_changed_files(changed_files),
            commit=commit,
            pr=pr,
            history=history,
            environment_change=environment_change,
        )
    finally:
        if history is not None:
            history.close()
    if as_json:
        click.echo(json.dumps(plan.to_json(), indent=2))
    else:
        click.echo(format_plan(plan))


def format_plan(plan: Plan) -> str:
    """A readable plan: one row per shard, then the steps, gating and approval."""
    rows = [("STAGE", "ACTION", "GPU", "GPUS", "SELECTED BY", "REASON")]
    for shard in plan.shards:
        selected = shard.selected_by + (" (named explicitly)" if shard.explicit else "")
        rows.append(
            (
                shard.stage,
                shard.action,
                shard.gpu_type,
                str(shard.gpu_count),
                selected,
                shard.reason,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        + "  "
        + row[-1]
        for row in rows
    ]
    counts = {action: len(plan.shards_to(action)) for action in ("run", "reuse", "skip")}
    lines.append(
        f"\n{len(plan.shards)} shard(s): {counts['run']} run, {counts['reuse']} reused, "
        f"{counts['skip']} skipped"
    )
    lines.append("steps:")
    for step in plan.steps:
        change = "".join(
            f" {sign}{len(names)}"
            for sign, names in (("+", step.added), ("-", step.removed))
            if names
        )
        lines.append(f"  {step.step}:{change or ' no change'} — {step.reason}")
    lines.append(
        "status: "
        + (
            "this run sets the PR's gating status"
            if plan.gating
            else f"Partly Tested — {plan.partly_tested_reason}"
        )
    )
    if plan.needs_approval:
        lines.append("approval needed: " + "; ".join(plan.approval_reasons))
    lines += [f"note: {note}" for note in plan.notes]
    return "\n".join(lines)
