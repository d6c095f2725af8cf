"""`bot gate`: the plan job's first step, before any GitHub App token is minted.

A comment the bot would not act on ends the job here, at the cost of at most one API call with
the job's own GITHUB_TOKEN: a comment that is not a /bot command for the bot (no call at all),
or one from a commenter who already had ``rate_limit`` /bot comments on the PR answered in the
hour (one read of the PR's comments). Only then do the later steps mint the App's token, fetch
the ledger and handle the event (which checks everything again). The App's login is not known
before its token is minted, so here a reply is any bot account's comment that carries the
bot's marker: another workflow's bot comment can only make the limit stricter, never looser.
Writes ``proceed`` (true / false) to GITHUB_OUTPUT. Exits 0, or 3 when GitHub stays unreachable.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.command("gate")
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=None)
def gate(config_path: Path | None) -> None:
    """Refuse cheaply, before any App token: not for the bot, or over the rate limit."""
    from stagebot.bot.comments.events import comment_event, ignore_reason, load_payload
    from stagebot.bot.comments.rate_limit import rate_limited
    from stagebot.bot.comments.replies import our_replies
    from stagebot.bot.config import load_config
    from stagebot.bot.github import ActionsEnv, RetryPolicy, connect
    from stagebot.bot.protocols.outputs import write_outputs

    env = ActionsEnv.from_environ()
    config = load_config(config_path)
    why = None
    if env.event_name == "issue_comment":
        event = comment_event(load_payload(env.event_path))
        why = ignore_reason(event, config.bot_login)
        if why is None:
            comments = connect(env, RetryPolicy.from_environ()).comments(event.number)
            bots = {c.author for c in comments if c.author_type == "Bot"}
            replies = [r for login in sorted(bots) for r in our_replies(comments, login)]
            if rate_limited(event, comments, replies, config.rate_limit):
                why = (
                    f"@{event.author} reached the limit of {config.rate_limit} answered /bot "
                    "comments on this PR per hour"
                )
    write_outputs(env.output, {"proceed": "false" if why else "true"})
    click.echo(f"no-op: {why}" if why else "proceed")
