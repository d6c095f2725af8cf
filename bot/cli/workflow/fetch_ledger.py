"""`bot fetch-ledger`: the plan job's first step, which replaces restoring the Actions cache.

For a `/bot` comment on a PR: the ledger the bot's newest reply vouches for, taken from an
artifact of one of the bot's own runs (bot/custody/transport.py). For a push to the default
branch: main's newest ledger from a report run. Writes it to ``--out``; finding none is not an
error (the pipeline starts without history). Nor is GitHub failing after the bounded retries: a
plan job that stopped here would leave the comment without a reply and the commit without a
status, so the failure is written to ``<out>.notice``, which `bot handle-event` puts in its
reply, and the pipeline starts without history. So is a PR ledger that fails its check (the
newest reply's: its run has no such artifact, or the bytes are not the digest): the notice says
the history could not be verified and why, and no older reply's ledger is taken instead (a
rollback would forget what later pipelines recorded). Exits 0.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command("fetch-ledger")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Where to write the ledger (nothing is written when none is found).",
)
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None)
def fetch_ledger(out: Path, config_path: Path | None) -> None:
    """Fetch the PR's (or main's) ledger from the bot's own runs' artifacts."""
    from stagebot.bot.config import load_config
    from stagebot.bot.custody.transport import UnverifiedHistory
    from stagebot.bot.github import ActionsEnv, GitHubError

    env = ActionsEnv.from_environ()
    config = load_config(config_path)
    try:
        notes = _fetch(env, config, out)
    except GitHubError as error:
        notes = _notice(
            out,
            f"The pipeline ledger could not be fetched from GitHub ({error}); this pipeline "
            "starts from an empty history (nothing is reused).",
        )
    except UnverifiedHistory as error:
        notes = _notice(
            out,
            f"The pipeline history of this PR could not be verified: {error}. This pipeline "
            "starts from an empty history (nothing is reused), never from an older reply's "
            "ledger.",
        )
    click.echo("\n".join(notes))


def _notice(out: Path, notice: str) -> list[str]:
    """Leave ``notice`` for handle-event's reply (no ledger is written); the log line."""
    from stagebot.bot.custody.trust import notice_file

    out.parent.mkdir(parents=True, exist_ok=True)
    notice_file(out).write_text(notice + "\n", encoding="utf-8")
    return [f"warning: {notice}"]


def _fetch(env, config, out: Path) -> list[str]:
    from stagebot.bot.comments.events import comment_event, ignore_reason, load_payload
    from stagebot.bot.comments.replies import our_replies
    from stagebot.bot.custody.transport import fetch_main_ledger, fetch_pr_ledger
    from stagebot.bot.github import RetryPolicy, connect

    if env.event_name == "issue_comment":
        event = comment_event(load_payload(env.event_path))
        why = ignore_reason(event, config.bot_login)
        if why is not None:
            return [f"no-op: {why}"]
        api = connect(env, RetryPolicy.from_environ())
        replies = our_replies(api.comments(event.number), config.bot_login)
        return fetch_pr_ledger(api, [reply.comment for reply in replies], config, out)[1]
    if env.event_name == "push":
        return fetch_main_ledger(connect(env, RetryPolicy.from_environ()), config, out)[1]
    return [f"no-op: {env.event_name} events carry no ledger"]
