"""`bot stage-setup`: install and set what a matrix entry's stage declares (a CI fan-out job's
step before `bot run-stage`): the project with its extras, the install commands, the env.

The setup comes from the catalog through the matrix entry (stages/setup.py), so no workflow
writes an install line by hand. Exit codes: 0 done, 2 a bad entry, 3 a command failed (the
runner's environment, not the tests).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import click

from stagebot.bot.cli.run_options import entry_option, load_entry
from stagebot.stages.errors import StagebotError


class SetupFailed(StagebotError):
    """A stage's setup command failed: the stage cannot run on this runner."""

    exit_code = 3


@click.command("stage-setup")
@entry_option
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    help="Print the shell lines (and env) instead of running them.",
)
def stage_setup(entry_arg: str, print_only: bool) -> None:
    """Run the setup a matrix entry declares, in the repository root (the working directory);
    its env goes to $GITHUB_ENV for the job's later steps."""
    from stagebot.stages.setup import check_setup

    entry = load_entry(entry_arg)
    try:  # the entry is data from the plan run: check it as the catalog was checked
        setup = check_setup(entry.setup)
    except ValueError as error:
        raise StagebotError(f"--entry {entry.stage}: {error}") from None
    env = dict(setup.env)
    if print_only:
        for name, value in env.items():
            click.echo(f"export {name}={shlex.quote(value)}")
        for line in setup.commands():
            click.echo(line)
        return
    for line in setup.commands():
        click.echo(f"$ {line}", err=True)
        done = subprocess.run(["bash", "-c", line], env={**os.environ, **env}, check=False)
        if done.returncode != 0:
            raise SetupFailed(
                f"{entry.stage}: setup command failed with exit status {done.returncode}: "
                f"{line} (the catalog's setup for this stage; fix it or the runner's image)"
            )
    github_env = os.environ.get("GITHUB_ENV")
    if env and github_env:
        with Path(github_env).open("a", encoding="utf-8") as file:
            file.writelines(f"{name}={value}\n" for name, value in env.items())
    click.echo(f"{entry.stage}: set up ({len(setup.commands())} commands, {len(env)} env)")
