"""`bot handle-event`: act on the GitHub Actions event that started this workflow run.

Reads the standard Actions variables (GITHUB_EVENT_NAME, GITHUB_EVENT_PATH, GITHUB_REPOSITORY,
GITHUB_API_URL, GITHUB_TOKEN, GITHUB_RUN_ID, GITHUB_RUN_NUMBER, GITHUB_SERVER_URL, GITHUB_OUTPUT)
and writes ``run``, ``matrix``, ``pipeline``, ``commit``, ``pr`` and ``reply_id`` to
GITHUB_OUTPUT, and, for a run with ``--out`` and ``--ledger``, ``artifact_digest``: the digest
of plan.json and the closed ledger (ledger_files.artifact_digest), which `bot publish
--artifact-digest` checks; with ``--ledger``, ``ledger_digest``: the sha256 of the ledger as the
job leaves it, which names the artifact the plan job uploads it as (bot/ledger_transport.py).
Exits 0 for every event it handled (a run, a no-op, a refusal, a
malformed command); non-zero only when it could not do its job (GitHub unreachable after
retries: 3; a missing variable or bad settings: 2).

- issue_comment: see bot/on_comment.py;
- push to the default branch: plans the post-merge pipeline (`/bot run --post-merge`) on the
  pushed commit, with no reply and no status; a restored ledger is used only when the bot
  recorded its digest (bot/main_ledger.py);
- anything else: a no-op.

The ``--ledger`` file is opened only when a step needs it (see on_comment.LedgerSource): a
damaged restored ledger never blocks a no-op, and one that a step needs is moved aside and
replaced by an empty one, which the reply and the log say.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from stagebot.bot.cli_options import catalog_option
from stagebot.bot.config import load_config
from stagebot.bot.events import comment_event, load_payload, push_event
from stagebot.bot.ledger_files import artifact_digest, artifact_files, file_digest
from stagebot.bot.on_comment import CommentHandler, LedgerSource, Outcome


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
    from stagebot.bot.cmd_fetch_ledger import notice_file
    from stagebot.bot.github import ActionsEnv, RetryPolicy, connect

    env = ActionsEnv.from_environ()
    config = load_config(config_path)
    policy = RetryPolicy.from_environ()
    payload = load_payload(env.event_path)
    source = LedgerSource(ledger)  # opened only by a step that needs it
    if ledger is not None and notice_file(ledger).is_file():  # fetch-ledger could not fetch it
        source.notice = notice_file(ledger).read_text(encoding="utf-8").strip()
    if env.event_name == "issue_comment":
        outcome = CommentHandler(
            env,
            config,
            comment_event(payload),
            connect=lambda: connect(env, policy),
            catalog_path=catalog,
            ledger_source=source,
        ).handle()
    elif env.event_name == "push":
        from stagebot.bot.main_ledger import RECORDED_WHERE, recorded_digests

        source.trusted = lambda: recorded_digests(lambda: connect(env, policy), ledger)
        source.recorded_where = RECORDED_WHERE
        outcome = _push(payload, catalog, env.run_number, source)
    else:
        outcome = Outcome(f"no-op: {env.event_name} events are not handled")
    if source.notice:
        click.echo(f"warning: {source.notice}", err=True)
    source.close()
    outputs = outcome.outputs()
    if ledger is not None and ledger.exists():  # names the ledger artifact the plan job uploads
        outputs["ledger_digest"] = file_digest(ledger)
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


def _push(
    payload: dict, catalog: Path | None, run_number: int | None, source: LedgerSource
) -> Outcome:
    from stagebot.bot.grammar import parse_comment
    from stagebot.stages.catalog import load_catalog
    from stagebot.stages.matrix import matrix_entries
    from stagebot.stages.planner import plan_run

    event = push_event(payload)
    if not event.on_default_branch:
        return Outcome(f"no-op: push to {event.ref}, not to {event.default_branch}")
    loaded = load_catalog(catalog)
    book = source.get()
    command = parse_comment("/bot run --post-merge")
    plan = plan_run(command, loaded, commit=event.sha, history=book)
    pipeline = run_number or ((book.latest_number() or 0) + 1 if book else 1)
    if book is not None:  # the default branch's history, which PR pipelines compare with
        book.start_pipeline(
            command=command.to_json(),
            commit=event.sha,
            plan=plan.to_json(),
            branch=event.default_branch,
            number=pipeline,
            meta={"stage_paths": loaded.suspect_patterns([s.stage for s in plan.shards])},
        )
    entries = [e.to_json() for e in matrix_entries(plan, loaded, pipeline)]
    return Outcome(
        f"post-merge pipeline #{pipeline} on {event.sha[:7]}: {len(entries)} shard(s) to run",
        run=True,
        matrix=entries,
        pipeline=pipeline,
        commit=event.sha,
        plan=plan.to_json(),
    )


def write_outputs(path: str | None, outputs: dict[str, str]) -> None:
    """Append ``key=value`` lines to GITHUB_OUTPUT (values are single-line); no file: print."""
    lines = "".join(f"{key}={value}\n" for key, value in outputs.items())
    assert all("\n" not in value for value in outputs.values())
    if path is None:
        click.echo(lines, nl=False)
        return
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(lines)
