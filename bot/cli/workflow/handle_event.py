"""`bot handle-event`: act on the GitHub Actions event that started this workflow run.

Reads the standard Actions variables (GITHUB_EVENT_NAME, GITHUB_EVENT_PATH, GITHUB_REPOSITORY,
GITHUB_API_URL, GITHUB_TOKEN, GITHUB_RUN_ID, GITHUB_RUN_NUMBER, GITHUB_SERVER_URL, GITHUB_OUTPUT)
and writes ``run``, ``matrix``, ``pipeline``, ``commit``, ``pr`` and ``reply_id`` to
GITHUB_OUTPUT, and, for a run with ``--out`` and ``--ledger``, ``artifact_digest``: the digest
of plan.json and the closed ledger (ledger_files.artifact_digest), which `bot publish
--artifact-digest` checks; with ``--ledger``, ``ledger_digest``: the sha256 of the ledger as the
job leaves it, and ``ledger_artifact``: the artifact name the plan job uploads it as
(bot/protocols/names.py). Exits 0 for every event it handled (a run, a no-op, a refusal, a
malformed command); non-zero only when it could not do its job (GitHub unreachable after
retries: 3; a missing variable or bad settings: 2; stagebot's own catalog or ledger failing:
the error's exit code, after a reply that says stagebot failed).

- issue_comment: see bot/comments/on_comment.py;
- push to the default branch: plans the post-merge pipeline (`/bot run --post-merge`) on the
  pushed commit, with no reply and no status; a restored ledger is used only when the bot
  recorded its digest (bot/custody/main_ledger.py);
- anything else: a no-op.

The ``--ledger`` file is opened only when a step needs it (bot/custody/trust.py, RestoredLedger): a
damaged restored ledger never blocks a no-op, and one that a step needs is moved aside and
replaced by an empty one, which the reply and the log say.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from stagebot.bot.cli.options import catalog_option


@click.command("handle-event")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    default=None,
    help="The bot's settings (default: .github/stagebot.yml when present, else the defaults).",
)
@catalog_option
@click.option(
    "--ledger",
    type=click.Path(path_type=Path),
    default=None,
    help="The pipeline ledger (SQLite) carried from the PR's previous pipeline.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for plan.json and outputs.json (what the report job needs).",
)
def handle_event(config_path, catalog, ledger, out) -> None:
    """Act on this workflow run's GitHub event; write run= and matrix= to GITHUB_OUTPUT."""
    from stagebot.bot.actions.post_merge import plan_post_merge
    from stagebot.bot.comments.events import comment_event, load_payload
    from stagebot.bot.comments.on_comment import CommentHandler
    from stagebot.bot.comments.outcome import Outcome
    from stagebot.bot.config import load_config
    from stagebot.bot.custody.files import artifact_digest, artifact_files, file_digest
    from stagebot.bot.github import ActionsEnv, RetryPolicy, connect
    from stagebot.bot.protocols.names import ledger_artifact
    from stagebot.bot.protocols.outputs import write_outputs

    env = ActionsEnv.from_environ()
    config = load_config(config_path)
    policy = RetryPolicy.from_environ()
    payload = load_payload(env.event_path)
    if env.event_name == "issue_comment":
        outcome = CommentHandler(
            env,
            config,
            comment_event(payload),
            connect=lambda: connect(env, policy),
            catalog_path=catalog,
            ledger_path=ledger,
        ).handle()
    elif env.event_name == "push":
        outcome = plan_post_merge(
            payload,
            catalog,
            env.run_number,
            ledger,
            lambda: connect(env, policy),
            audit_rate=config.reuse_audit_rate,
        )
    else:
        outcome = Outcome(f"no-op: {env.event_name} events are not handled")
    if outcome.notice:
        click.echo(f"warning: {outcome.notice}", err=True)
    outputs = outcome.outputs()
    if ledger is not None and ledger.exists():  # names the ledger artifact the plan job uploads
        outputs["ledger_digest"] = file_digest(ledger)
        outputs["ledger_artifact"] = ledger_artifact(outputs["ledger_digest"])
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        if outcome.plan is not None:
            plan = out / "plan.json"
            plan.write_text(json.dumps(outcome.plan, indent=2) + "\n", encoding="utf-8")
            if ledger is not None:
                outputs["artifact_digest"] = artifact_digest(artifact_files(plan, ledger))
        (out / "outputs.json").write_text(json.dumps(outputs, indent=2) + "\n", encoding="utf-8")
    write_outputs(env.output, outputs)
    click.echo(outcome.reason)
