"""`bot run` of a small repository made in a test's folder, and what its ledger recorded: what
the reuse-by-key tests share (tests/e2e/test_key_reuse.py,
tests/harness/reuse/test_reuse_audit.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fixtures.botrun import bot, results

CATALOG = """
gpu_types:
  CPU: {{device_names: [], runner_labels: [ubuntu-latest]}}
families:
  - name: CPU-PyTorch
    kind: test
    timeout_minutes: 5
    suites: [{{path: {suite}}}]
"""


def run(tmp: Path, commit: str, *flags: str, comment="/bot run", env=None):
    out = tmp / f"out-{commit}"
    done = bot(
        "run", "--catalog", str(tmp / "catalog.yaml"), "--ledger", str(tmp / "ledger.sqlite"),
        "--root", str(tmp / "repo"), "--commit", commit, "--out", str(out), *flags, comment,
        env=env,
    )  # fmt: skip
    return done, out


def executed(out: Path) -> list[str]:
    return sorted(t["test_id"].split("::")[1] for r in results(out).values() for t in r["tests"])


def reused(tmp: Path, pipeline: int) -> dict[str, tuple[int, str]]:
    with sqlite3.connect(tmp / "ledger.sqlite") as db:
        rows = db.execute(
            "SELECT t.test_id, t.reused_from, t.reused_by FROM tests t JOIN pipelines p"
            " ON p.id = t.pipeline_id WHERE p.number = ? AND t.reused_from IS NOT NULL",
            (pipeline,),
        ).fetchall()
    return {test.split("::")[1]: (source, how) for test, source, how in rows}
