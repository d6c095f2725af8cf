"""`bot publish`: the Actions report job. Records the stage jobs' StageResults into the ledger,
renders the report, edits the pipeline's one reply into it and sets the gating status
(bot/actions/publishing.py; what is recorded and how: harness/pipeline/intake.py; whose status wins:
bot/actions/gating_status.py).

Exits 0 once published (whatever the pipeline's state); 3 when GitHub stayed unreachable or
the artifact does not match its digest, 2 for bad input.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command("publish")
@click.option(
    "--results",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder of the stage jobs' shard folders (result.json, tests.jsonl, …); may be empty.",
)
@click.option(
    "--ledger",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The PR's ledger, as the plan job left it.",
)
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="plan.json from `bot handle-event --out` (used when the ledger lacks the pipeline).",
)
@click.option(
    "--base-ledger",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The default branch's ledger, read-only (absent file: compare within --ledger).",
)
@click.option(
    "--pipeline",
    type=click.IntRange(min=1),
    default=None,
    help="The pipeline number (default: GITHUB_RUN_NUMBER).",
)
@click.option("--cancelled", is_flag=True, help="The workflow run was cancelled: ABORTED.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also write report.md and report.html here.",
)
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None)
@click.option(
    "--artifact-digest",
    default=None,
    metavar="SHA256",
    help="The plan job's artifact_digest output: --plan and --ledger must match it, or nothing "
    "is published (exit 3).",
)
@click.option(
    "--stage-run-id",
    type=click.IntRange(min=1),
    default=None,
    help="The workflow run whose jobs ran the stages (their pages are the full logs the report "
    "links; default: this run, GITHUB_RUN_ID).",
)
def publish(
    results,
    ledger,
    plan_path,
    base_ledger,
    pipeline,
    cancelled,
    out,
    config_path,
    artifact_digest,
    stage_run_id,
) -> None:
    """Record StageResults, render the report, edit the reply, set the status."""
    from stagebot.bot.actions.publishing import PublishRequest, publish
    from stagebot.bot.config import load_config
    from stagebot.bot.github import ActionsEnv

    env = ActionsEnv.from_environ()
    config = load_config(config_path)
    number = pipeline or env.run_number
    if number is None:
        raise click.UsageError("give --pipeline N (or set GITHUB_RUN_NUMBER)")
    if artifact_digest is not None and plan_path is None:
        raise click.UsageError("--artifact-digest needs --plan (the digest covers plan.json)")
    request = PublishRequest(
        results=results,
        ledger=ledger,
        plan_path=plan_path,
        base_ledger=base_ledger,
        pipeline=number,
        cancelled=cancelled,
        out=out,
        artifact_digest=artifact_digest,
        stage_runs=(stage_run_id,) if stage_run_id else (),
    )
    click.echo("\n".join(publish(request, env, config)))
