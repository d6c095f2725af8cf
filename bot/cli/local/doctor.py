"""`bot doctor`: check this repository's GitHub side for the bot, each check with its fix.

Reads GITHUB_TOKEN (a token that may read the repository's settings: an admin's), GITHUB_API_URL
(default https://api.github.com) and, to check the App's permissions, STAGEBOT_APP_ID and
STAGEBOT_APP_PRIVATE_KEY. Exit 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click


@click.command("doctor")
@click.option(
    "--repo",
    default=lambda: os.environ.get("GITHUB_REPOSITORY", ""),
    help="owner/name (default: $GITHUB_REPOSITORY).",
)
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    help="The repository's checkout, whose settings and catalog say what should be there.",
)
@click.option("--without-app", is_flag=True, help="The bot uses the workflows' own token.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
def doctor(repo: str, root: Path, without_app: bool, as_json: bool) -> None:
    """Check the workflows, stage branch, runners, App and Actions settings on GitHub."""
    from stagebot.bot.adopt.doctor_checks import local_context, run_checks
    from stagebot.bot.adopt.doctor_client import DoctorClient
    from stagebot.bot.github import SetupError

    token = os.environ.get("GITHUB_TOKEN")
    if repo.count("/") != 1 or not token:
        raise SetupError(
            "give --repo owner/name (or GITHUB_REPOSITORY) and GITHUB_TOKEN: a token that may "
            "read the repository's settings (an admin's, e.g. `gh auth token`)"
        )
    client = DoctorClient(os.environ.get("GITHUB_API_URL", "https://api.github.com"), repo, token)
    app_id, key = os.environ.get("STAGEBOT_APP_ID"), os.environ.get("STAGEBOT_APP_PRIVATE_KEY")
    app = (app_id, key) if app_id and key else None
    checks = run_checks(local_context(root, client, app, without_app))
    if as_json:
        click.echo(json.dumps([check.to_json() for check in checks], indent=2))
    else:
        for check in checks:
            click.echo(f"{'PASS' if check.ok else 'FAIL'} {check.name}: {check.detail}")
            if not check.ok:
                click.echo(f"     fix: {check.fix}")
        failed = sum(not check.ok for check in checks)
        click.echo(f"{len(checks) - failed} of {len(checks)} checks pass")
    sys.exit(0 if all(check.ok for check in checks) else 1)
