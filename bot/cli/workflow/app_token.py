"""`bot app-token`: mint the bot's GitHub App installation token in the job that needs it.

Reads STAGEBOT_APP_ID and STAGEBOT_APP_PRIVATE_KEY (the App's id and PEM private key, from the
repository's variables and secrets). Writes ``token`` (masked in the log first) and ``login``
(``<app slug>[bot]``, which becomes the bot's login) to GITHUB_OUTPUT. With neither set it
writes empty values and the job falls back to its GITHUB_TOKEN; with only one set it is an
error (exit 2). GitHub refusing (App not installed, permissions not granted) exits 3.
"""

from __future__ import annotations

import os

import click

# What each job's token may do; GitHub caps it at what the App was granted.
PERMISSIONS = {
    "plan": {
        "actions": "write",  # dispatch the stage workflow, cancel stage runs, read artifacts
        "contents": "read",
        "issues": "write",  # reply, react
        "pull_requests": "read",
        "statuses": "write",
    },
    "report": {
        "actions": "write",  # the stage and plan runs, their artifacts; fail-fast cancels runs
        "contents": "read",
        "issues": "write",  # edit the reply into the report
        "statuses": "write",
    },
}


@click.command("app-token")
@click.option(
    "--job",
    type=click.Choice(sorted(PERMISSIONS)),
    required=True,
    help="Which job's permissions the token gets.",
)
def app_token(job: str) -> None:
    """Mint the GitHub App's installation token for this repository (token=, login=)."""
    from stagebot.bot.github import (
        ActionsEnv,
        RetryPolicy,
        SetupError,
        mint_installation_token,
    )
    from stagebot.bot.protocols.outputs import write_outputs

    env = ActionsEnv.from_environ()
    app_id = os.environ.get("STAGEBOT_APP_ID", "").strip()
    key = os.environ.get("STAGEBOT_APP_PRIVATE_KEY", "").strip()
    if not app_id and not key:
        write_outputs(env.output, {"token": "", "login": ""})
        click.echo("no GitHub App is set up: the job uses its GITHUB_TOKEN")
        return
    if not app_id or not key:
        missing = "STAGEBOT_APP_ID" if not app_id else "STAGEBOT_APP_PRIVATE_KEY"
        raise SetupError(
            f"{missing} is empty while the other App setting is set: set both (docs/github.md: "
            "the bot's GitHub App) or neither"
        )
    if not app_id.isdigit():
        raise SetupError(f"STAGEBOT_APP_ID={app_id!r} is not the App's numeric id")
    identity = mint_installation_token(
        env.api_url, env.repository, app_id, key, PERMISSIONS[job], RetryPolicy.from_environ()
    )
    click.echo(f"::add-mask::{identity.token}")
    write_outputs(env.output, {"token": identity.token, "login": identity.login})
    click.echo(f"minted an installation token of {identity.login} for the {job} job")
