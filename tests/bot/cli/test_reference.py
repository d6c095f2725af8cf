"""docs/reference.md is rendered from the declarations (`bot docs reference`): the committed file
is current, a changed declaration makes `--check` fail, and the rendering covers every command,
option and `/bot` subcommand."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import click
import pytest
from helpers.cli import bot

from stagebot.bot.cli.local import docs
from stagebot.bot.cli.main import COMMANDS, cli
from stagebot.bot.cli.reference import github_anchor, render
from stagebot.bot.comments import grammar

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "docs" / "reference.md"


def commands() -> list[tuple[str, click.Command]]:
    """(command path, command) for every command and subcommand, read from the click tree."""
    found, root = [], click.Context(cli, info_name="bot")

    def walk(ctx: click.Context, name: str) -> None:
        command = ctx.command.get_command(ctx, name)
        sub = click.Context(command, info_name=name, parent=ctx)
        found.append((sub.command_path, command))
        if isinstance(command, click.Group):
            for child in command.list_commands(sub):
                walk(sub, child)

    for name in COMMANDS:
        walk(root, name)
    return found


def section(reference: str, path: str) -> str:
    return reference.split(f"### `{path}`\n", 1)[1].split("\n### ", 1)[0]


def test_the_committed_reference_is_current(capsys) -> None:
    code, out, err = bot(capsys, "docs", "reference", "--check")
    assert code == 0, err
    assert out.strip() == f"{COMMITTED}: current"


def test_a_changed_option_help_makes_the_check_fail(capsys, monkeypatch) -> None:
    """The negative control: one option's help changes and the committed file is stale."""
    before = COMMITTED.read_text(encoding="utf-8")
    run = dict(commands())["bot run"]
    (option,) = [p for p in run.params if p.name == "shard_timeout"]
    monkeypatch.setattr(option, "help", "A changed help text.")
    code, out, err = bot(capsys, "docs", "reference", "--check")
    assert code == 1, out + err
    assert f"{COMMITTED} is stale: line " in err
    assert "A changed help text." in err and "run `bot docs reference` to regenerate it" in err
    assert COMMITTED.read_text(encoding="utf-8") == before  # --check writes nothing


def test_a_changed_bot_subcommand_makes_the_check_fail(capsys, monkeypatch) -> None:
    changed = replace(grammar.SUBCOMMANDS["kill"], summary="Stop nothing at all.")
    monkeypatch.setitem(grammar.SUBCOMMANDS, "kill", changed)
    code, _, err = bot(capsys, "docs", "reference", "--check")
    assert code == 1 and "Stop nothing at all." in err


def test_it_writes_a_stale_file_and_then_finds_it_current(capsys, tmp_path) -> None:
    out = tmp_path / "reference.md"
    out.write_text("# old\n", encoding="utf-8")
    code, printed, err = bot(capsys, "docs", "reference", "--check", "--out", str(out))
    assert code == 1 and "line 1 is '# old'" in err
    assert out.read_text(encoding="utf-8") == "# old\n"  # --check writes nothing
    assert bot(capsys, "docs", "reference", "--out", str(out))[:2] == (0, f"{out}: rewritten\n")
    assert out.read_text(encoding="utf-8") == COMMITTED.read_text(encoding="utf-8")
    assert bot(capsys, "docs", "reference", "--check", "--out", str(out))[0] == 0


def test_every_command_and_option_is_in_the_reference() -> None:
    reference = render()
    paths = commands()
    assert len(paths) >= len(COMMANDS) + 3  # the groups' subcommands too
    for path, command in paths:
        body = section(reference, path)
        assert f"```text\n{path} " in body, path
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert re.search(rf"^\| `{re.escape(param.opts[0])}\b", body, re.M), (path, param)


def test_every_bot_subcommand_and_flag_is_in_the_reference() -> None:
    language = render().split("## The `/bot` command language\n", 1)[1]
    for sub in grammar.SUBCOMMANDS.values():
        assert f"### `{sub.usage}`" in language, sub.name
        for flag in sub.flags:
            assert f"| `{flag.name}" in language, (sub.name, flag.name)


def test_the_rendering_does_not_depend_on_the_terminal(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    narrow = render()
    monkeypatch.setenv("COLUMNS", "300")
    assert render() == narrow == COMMITTED.read_text(encoding="utf-8")


def test_an_installed_stagebot_asks_for_out(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(docs, "CHECKOUT", tmp_path / "site-packages" / "stagebot")
    code, _, err = bot(capsys, "docs", "reference")
    assert code == 2
    assert "not a checkout, so there is no docs/reference.md to write: give --out PATH" in err


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("`bot run-stage`", "bot-run-stage"),
        ("`/bot run [--sha SHA] [flags]`", "bot-run---sha-sha-flags"),
        (
            '`/bot skip --sha SHA --comment "REASON"` ⚠️',
            "bot-skip---sha-sha---comment-reason-",
        ),
        ("The bot's GitHub App", "the-bots-github-app"),
        ("Runners on a personal repository", "runners-on-a-personal-repository"),
        ("snake_case stays", "snake_case-stays"),
    ],
)
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert github_anchor(heading.replace("`", "")) == anchor


@pytest.mark.parametrize("args", [["parse", "/bot run"], ["dry-run", "/bot run"]])
def test_the_fast_commands_do_not_load_the_reference(args: list[str]) -> None:
    code = (
        "import sys; from stagebot.bot.cli.main import main\n"
        f"try: main({args!r})\nexcept SystemExit: pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('stagebot.bot.cli.reference', "
        "'stagebot.bot.cli.local.docs'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"
