"""Benchmark: how soon `bot run` says a NEW failure, and how soon the pipeline ends, with fail-fast
and without it.

Run from the repository root:  python tests/bench/first_signal.py [--shard-timeout S]
On the fixture catalog (no GPU, no torch): a pipeline on main where CPU-PyTorch-Toggle-1 passes,
then a run that breaks it (NEW) while CPU-PyTorch-Slow-1 (one 10-minute test) runs beside it on
a second CPU slot. Prints, from the start of each run: when the `NEW …` line reached stdout, when
the pipeline ended, and Slow-1's state; once as it is (fail-fast) and once with
--disable-fail-fast, where Slow-1 runs to ``--shard-timeout`` (default 60 s) instead of 10 min.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "tests" / "fixtures" / "catalog"
STAGES = "CPU-PyTorch-Toggle-1, CPU-PyTorch-Slow-1"


def bot_run(ledger: Path, out: Path, comment: str, *extra: str, env=None, commit="beef"):
    """`bot run` in a fresh process; (seconds to the NEW line or None, seconds to the end)."""
    argv = [sys.executable, "-c", "from stagebot.bot.cli.main import main; main()", "run"]
    argv += ["--catalog", str(CATALOG), "--ledger", str(ledger), "--out", str(out)]
    argv += ["--commit", commit, *extra, comment]
    start = time.monotonic()
    process = subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    first = None
    for line in process.stdout:
        if first is None and line.startswith("NEW "):
            first = time.monotonic() - start
    process.wait()
    return first, time.monotonic() - start


def slow_state(out: Path) -> str:
    return json.loads((out / "CPU-PyTorch-Slow-1" / "result.json").read_text())["state"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shard-timeout", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        ledger = work / "ledger.sqlite"
        base = '/bot run --stage-list "CPU-PyTorch-Toggle-1"'
        bot_run(ledger, work / "main", base, "--branch", "main", commit="ba5e")
        comment = f'/bot run --stage-list "{STAGES}"'
        broken = {"STAGEBOT_FIXTURE_BROKEN": "1"}
        slots = ("--cpu-slots", "2", "--shard-timeout", str(args.shard_timeout))
        print(f"{'run':<22} {'NEW said at':>12} {'ended at':>10}  Slow-1")
        for name, flags in (("fail-fast", ""), ("--disable-fail-fast", " --disable-fail-fast")):
            out = work / name
            said, ended = bot_run(ledger, out, comment + flags, *slots, env=broken)
            shown = f"{said:.1f} s" if said is not None else "never"
            print(f"{name:<22} {shown:>12} {ended:>8.1f} s  {slow_state(out)}")
    print(f"load: {os.getloadavg()[0]:.1f} (1 min)")


if __name__ == "__main__":
    main()
