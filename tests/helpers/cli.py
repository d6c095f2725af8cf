"""`bot` in this process, as the CLI runs it: the exit code and what it printed."""

from __future__ import annotations

import pytest

from stagebot.bot.cli.main import main


def bot(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `bot ARGS…`."""
    try:
        main(list(args))
        code = 0
    except SystemExit as done:
        code = done.code or 0
    out, err = capsys.readouterr()
    return code, out, err
