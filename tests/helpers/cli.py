"""`bot` as the CLI runs it: in this process (the exit code and what it printed), or in a fresh
process as a user's shell starts it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def bot_process(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`bot ARGS…` in a fresh process started in ``cwd``, with ``env`` over this one's; the
    timeout only stops a hang."""
    return subprocess.run(
        [sys.executable, "-c", "from stagebot.bot.cli.main import main; main()", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
