"""Reuse by key in an adopted repository: how many tests a docs-only commit reuses, and what
`bot run` costs against plain pytest on the same suite (issue 46).

A copy of the repository (``--repo``: a source tree such as packaging 24.2's sdist; ``--sample``:
the planted-regression sample, whose root conftest loads an env file) gets a one-family catalog
whose suite is ``--suite`` (default ``tests``). Pipeline #1 runs every test on main (it records
the keys, the observed part among them); then, ``--repeat`` times, alternating:

- plain ``python -m pytest SUITE -q`` in the copy (the baseline);
- with ``--full``, `bot run` of a full pipeline with reuse off (``--disable-reuse-test``):
  stagebot's own cost when nothing is reused;
- with ``--plugin``, pytest as a shard runs it (``--stagebot-jsonl``, ``--stagebot-observe``):
  what the stream and the observed key's audit hook cost inside pytest;
- `bot run` of a docs-only commit (``--docs FILE`` edited): the reuse and its wall time.

It prints each run's wall time, the medians, the ratios to plain pytest, the tests reused by key
and the load average (the machine may be shared: give the load beside the figures).

    python tests/bench/adopted_reuse.py --repo /tmp/packaging-24.2 --docs docs/index.rst \\
        --env PYTHONPATH=src --repeat 3
    python tests/bench/adopted_reuse.py --sample --repeat 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.planted import CATALOG, build  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--repo", type=Path, help="a source tree to adopt (copied)")
    where.add_argument("--sample", action="store_true", help="the planted-regression sample")
    parser.add_argument("--suite", default="tests", help="the family's suite path")
    parser.add_argument("--docs", default="docs/guide.md", help="the file a docs commit edits")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for every run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="also time a run with reuse off")
    parser.add_argument("--plugin", action="store_true", help="also time pytest with our plugin")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="adopted-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    root = work / "repo"
    if args.sample:
        build(root)
    else:
        shutil.copytree(args.repo, root, symlinks=True)
        suite = f"{{path: {args.suite}}}"
        (work / "catalog.yaml").write_text(CATALOG.replace("{path: tests}", suite))
    env = {**os.environ, **dict(item.split("=", 1) for item in args.env)}
    ledger = work / "ledger.sqlite"

    def bot_run(commit: str, *flags: str) -> tuple[float, subprocess.CompletedProcess]:
        argv = [sys.executable, "-c", "from stagebot.bot.cli.main import main; main()", "run"]
        argv += ["--catalog", str(work / "catalog.yaml"), "--ledger", str(ledger)]
        argv += ["--root", str(root), "--commit", commit, "--branch", "main"]
        argv += ["--out", str(work / f"out-{commit}"), " ".join(["/bot run", *flags])]
        return timed(argv, cwd=root, env=env)

    first, done = bot_run("c0")
    print(f"pipeline 1 (every test, keys recorded): {first:.1f} s, exit {done.returncode}")
    plain, full, plugin, docs, reused = [], [], [], [], []
    for number in range(args.repeat):
        seconds, _ = timed([sys.executable, "-m", "pytest", args.suite, "-q"], cwd=root, env=env)
        plain.append(seconds)
        if args.full:
            seconds, _ = bot_run(f"full{number}", "--disable-reuse-test")
            full.append(seconds)
        if args.plugin:
            streams = [f"--stagebot-jsonl={work / 'stream.jsonl'}"]
            streams.append(f"--stagebot-observe={work / 'observed'}")
            pytest = [sys.executable, "-m", "pytest", args.suite, "-q", *streams]
            seconds, _ = timed(pytest, cwd=root, env=env)
            plugin.append(seconds)
        edited = root / args.docs
        edited.parent.mkdir(parents=True, exist_ok=True)
        with open(edited, "a", encoding="utf-8") as docs_file:
            docs_file.write(f"\nA docs edit, number {number}.\n")
        seconds, done = bot_run(f"docs{number}")
        docs.append(seconds)
        reused.append(by_key(ledger, f"docs{number}"))
        without = f", bot run without reuse {full[-1]:.1f} s" if args.full else ""
        without += f", pytest with our plugin {plugin[-1]:.1f} s" if args.plugin else ""
        print(
            f"round {number + 1}: plain pytest {plain[-1]:.1f} s{without}, docs-only commit "
            f"{docs[-1]:.1f} s ({reused[-1]}), load {load()}"
        )
    base = statistics.median(plain)
    print(f"median plain pytest: {base:.1f} s")
    medians = (("bot run, no reuse", full), ("pytest, our plugin", plugin), ("docs-only", docs))
    for what, times in medians:
        if not times:
            continue
        median = statistics.median(times)
        print(f"median {what}: {median:.1f} s ({median / base:.2f}x plain pytest)")
    print(f"docs-only commit: {reused[-1]}")


def timed(argv: list[str], **kwargs) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    return time.perf_counter() - start, done


def by_key(ledger: Path, commit: str) -> str:
    """'N of M tests reused by key (P%)' for the pipeline of ``commit``."""
    with sqlite3.connect(ledger) as db:
        total, reused = db.execute(
            "SELECT COUNT(*), SUM(t.reused_by = 'key') FROM tests t JOIN pipelines p"
            " ON p.id = t.pipeline_id WHERE p.commit_id = ?",
            (commit,),
        ).fetchone()
    reused = reused or 0
    return f"{reused} of {total} tests reused by key ({100 * reused / max(total, 1):.1f}%)"


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    main()
