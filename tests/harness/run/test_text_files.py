"""Text stagebot writes is UTF-8 whatever the locale, and logs are read as a bounded tail."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from dataclasses import replace

from fixtures.botrun import CATALOG, ROOT
from helpers.shards import entry

from stagebot.harness.run.shard import ShardContext, run_shard


def test_report_files_are_utf8_under_an_ascii_locale(tmp_path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LC_", "LANG", "PYTHONIOENCODING", "PYTHONUTF8"))
    }
    # The C locale with Python's UTF-8 mode and locale coercion off: the default encoding is ASCII.
    env.update(LC_ALL="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", "from stagebot.bot.cli.main import main; main()", "run",
         "--catalog", str(CATALOG), "--ledger", str(tmp_path / "ledger.sqlite"), "--out", str(out),
         "--commit", "c0ffee", '/bot run --stage-list "CPU-Build_Check"'],
        cwd=ROOT, env=env, capture_output=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr).decode("ascii", "replace")
    assert (out / "report.md").read_text(encoding="utf-8").startswith("### ✅")
    assert "— SUCCESS</title>" in (out / "report.html").read_text(encoding="utf-8")


def test_a_build_steps_log_is_read_as_a_bounded_tail(tmp_path) -> None:
    noisy = (
        "python3 -c \"print(('x' * 999 + '\\n') * 40_000, end='')\"; echo 'ERROR: the end'; exit 1"
    )
    build = replace(entry("CPU-Build_Check"), kind="build", suites=[], command=noisy)
    context = ShardContext(out_dir=tmp_path / "out", root=tmp_path)
    tracemalloc.start()
    try:
        result = run_shard(build, context)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (tmp_path / "out" / "log.txt").stat().st_size > 40_000_000
    assert result.state == "FAILURE" and result.evidence == "command exited 1: ERROR: the end"
    assert peak < 4_000_000, f"{peak / 1e6:.0f} MB held while reading a 40 MB log"
