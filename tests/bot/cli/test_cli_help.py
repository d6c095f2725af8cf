"""The first hour at the command line: grouped help with whole descriptions, `bot help COMMAND`,
the version with its commit, a did-you-mean for almost-commands, and a missing CuTe DSL as the
environment's fault."""

from __future__ import annotations

import subprocess
import sys

import pytest
from fixtures.botrun import ROOT
from helpers.cli import bot

from stagebot.bot.cli.main import COMMANDS


def test_root_help_groups_the_commands_with_their_whole_descriptions(capsys) -> None:
    from stagebot.bot.cli.main import SECTIONS

    code, out, _ = bot(capsys, "--help")
    assert code == 0
    names = [name for _, described in SECTIONS for name in described]
    assert sorted(names) == sorted(COMMANDS)  # each command in exactly one section
    flat = " ".join(out.split())
    local, github = flat.index("Commands for this machine:"), flat.index("GitHub workflows run:")
    for title, described in SECTIONS:
        for name, description in described.items():
            where = flat.index(f" {name} {description}")  # whole, never cut with "..."
            assert (where > github) == ("GitHub" in title) and where > local, name
    assert "..." not in out[out.index("Commands for this machine:") :]


def test_help_command_shows_that_commands_help(capsys) -> None:
    code, out, _ = bot(capsys, "help", "run")
    assert code == 0 and out.startswith("Usage: bot run [OPTIONS] COMMENT")
    assert "--shard-timeout" in out
    code, _, err = bot(capsys, "help", "rnu")
    assert code == 2 and "unknown command 'rnu'; did you mean 'run'?" in err


def test_version_names_the_commit_of_the_checkout(capsys) -> None:
    code, out, _ = bot(capsys, "--version")
    head = subprocess.run(
        ["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    assert code == 0 and out.startswith("bot, version ")
    assert f"(commit {head}" in out and f"of the checkout {ROOT})" in out


@pytest.mark.parametrize(
    ("comment", "meant"),
    [
        ("/Bot run", "/bot run"),
        ("/bto run --disable-fail-fast", "/bot run --disable-fail-fast"),
        ("bot run", "/bot run"),
        ("Thanks!\n/BOT help", "/bot help"),
        ("/bott kill", "/bot kill"),
    ],
)
@pytest.mark.parametrize("command", ["run", "dry-run"])
def test_an_almost_command_gets_a_did_you_mean(capsys, command, comment, meant) -> None:
    code, out, err = bot(capsys, command, comment)
    assert code == 2, out + err
    assert "is not a command (only a line whose first word is exactly /bot is)" in err
    assert err.rstrip().endswith(f"did you mean {meant!r}?"), err


@pytest.mark.parametrize(
    "comment", ["hello", "I will run the bot run later", "/but run it", "bot  \t ", "/Bot"]
)
def test_plain_comments_are_not_almost_commands(capsys, comment) -> None:
    code, out, err = bot(capsys, "dry-run", comment)
    assert code == 0 and "nothing to plan" in out and "did you mean" not in out + err


def test_parse_says_the_did_you_mean_too(capsys) -> None:
    code, out, _ = bot(capsys, "parse", "/Bot run")
    assert code == 0
    assert out.startswith("no /bot command in this comment (nothing to do); line 1:")


def test_kernels_build_without_cute_dsl_is_the_environments_fault() -> None:
    blocked = (
        "import sys; sys.modules['cutlass'] = None\n"  # what a machine without CuTe DSL sees
        "from stagebot.bot.cli.main import main; main(['kernels', 'build', '--arch', 'sm_90a'])"
    )
    done = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.startswith("Error: environment: CuTe DSL (nvidia-cutlass-dsl) is not")
    assert "pip install 'stagebot[kernels]'" in done.stderr and "Traceback" not in done.stderr
