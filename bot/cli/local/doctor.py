"""`bot doctor`: check this repository's GitHub side for the bot, each check with its fix.

The repository's own checks need no network and run first; then GitHub's, reading GITHUB_TOKEN (a
token that may read the repository's settings: an admin's), GITHUB_API_URL (default
https://api.github.com) and, to check the App's permissions, STAGEBOT_APP_ID and
STAGEBOT_APP_PRIVATE_KEY; without a token or a network each of those says "not checked" and why.
Exit 0 when every check passes, 1 otherwise (a check not made is not a pass).
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
    default=None,
    help="The repository's checkout, whose settings and catalog say what should be there "
    "(default: the nearest folder at or above this one with .github/stagebot-init.yml).",
)
@click.option("--without-app", is_flag=True, help="The bot uses the workflows' own token.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
def doctor(repo: str, root: Path | None, without_app: bool, as_json: bool) -> None:
    """Check this repository's files, then the workflows, stage branch, runners, App and Actions
    settings on GitHub (without a token or a network: "not checked", each with why)."""
    from stagebot.bot.adopt.doctor_checks import local_context, run_checks
    from stagebot.bot.adopt.doctor_client import DoctorClient
    from stagebot.bot.adopt.workflows import find_home

    root = root or find_home(Path.cwd()) or Path.cwd()
    token = os.environ.get("GITHUB_TOKEN")
    offline = (
        "no --repo owner/name (or GITHUB_REPOSITORY)"
        if repo.count("/") != 1
        else "no GITHUB_TOKEN: give a token that may read the repository's settings (an "
        "admin's, e.g. `gh auth token`)"
        if not token
        else ""
    )
    api_url = os.environ.get("GITHUB_API_URL", "https://api.github.com")
    client = None if offline else DoctorClient(api_url, repo, token)
    app_id, key = os.environ.get("STAGEBOT_APP_ID"), os.environ.get("STAGEBOT_APP_PRIVATE_KEY")
    app = (app_id, key) if app_id and key else None
    checks = run_checks(local_context(root, client, app, without_app, offline))
    if as_json:
        click.echo(json.dumps([check.to_json() for check in checks], indent=2))
    else:
        for check in checks:
            mark = "PASS" if check.ok else "FAIL" if check.checked else "SKIP"
            click.echo(f"{mark} {check.name}: {check.detail}")
            if check.fix and not check.ok:
                click.echo(f"     fix: {check.fix}")
        passed = sum(check.ok for check in checks)
        unchecked = sum(not check.checked for check in checks)
        tail = f"; {unchecked} not checked" if unchecked else ""
        click.echo(f"{passed} of {len(checks)} checks pass{tail}")
    sys.exit(0 if all(check.ok for check in checks) else 1)
