"""`bot audit-reuse`: a seeded sample of the tests reused by key runs for real; a disagreement
is a reuse fault in the ledger, shown in the report, and that test is not reused by key again.

The planted miss is one neither the static reading nor the observed run can see (docs/reuse.md,
"Left to the audit"): a child Python opens a file by a path no literal names, so the key ignores
it (the audit hook sees the test's own process only)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from fixtures.botrun import bot
from helpers.key_reuse import CATALOG, executed, reused, run

from stagebot.harness.reuse.sampled import sample

TEST = """import subprocess
import sys

CHILD = "print(open('res' + 'ources/value.txt').read())"  # no literal names the file


def test_reads_a_file_the_key_cannot_see():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
    assert done.stdout.strip() == "1"


def test_plain():
    assert True
"""
BLIND = "tests/test_blind.py::test_reads_a_file_the_key_cannot_see"


def repo(tmp: Path) -> Path:
    root = tmp / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "resources").mkdir()
    (root / "tests" / "test_blind.py").write_text(TEST)
    (root / "resources" / "value.txt").write_text("1")
    (tmp / "catalog.yaml").write_text(CATALOG.format(suite="tests/test_blind.py"))
    return root


def audit(tmp: Path, pipeline: int, *flags: str):
    return bot(
        "audit-reuse", "--catalog", str(tmp / "catalog.yaml"), "--ledger",
        str(tmp / "ledger.sqlite"), "--root", str(tmp / "repo"), "--out", str(tmp / "audit"),
        "--pipeline", str(pipeline), *flags,
    )  # fmt: skip


def test_a_disagreement_is_a_fault_shown_in_the_report_and_ends_reuse_by_key(tmp_path) -> None:
    root = repo(tmp_path)
    assert run(tmp_path, "c1")[0].returncode == 0
    assert run(tmp_path, "c2")[0].returncode == 0  # nothing changed: both reused by key
    agreed = audit(tmp_path, 2, "--rate", "1")
    assert agreed.returncode == 0, agreed.stdout + agreed.stderr
    assert "no disagreement: every audited test passed for real" in agreed.stdout

    (root / "resources" / "value.txt").write_text("2")  # breaks the test; its key stays
    done, out = run(tmp_path, "c3")
    assert done.returncode == 0 and executed(out) == []  # the key's blind spot: reused
    found = audit(tmp_path, 3, "--rate", "1", "--seed", "7")
    assert found.returncode == 1, found.stdout + found.stderr
    assert f"reuse fault: {BLIND} (CPU-PyTorch-1), reused from #1: it failed" in found.stdout
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
        (meta,) = db.execute("SELECT meta FROM pipelines WHERE number = 3").fetchone()
    (recorded,) = json.loads(meta)["reuse_audits"]
    assert (recorded["rate"], recorded["seed"]) == (1.0, 7) and len(recorded["outcomes"]) == 2

    report = bot("report", "--ledger", str(tmp_path / "ledger.sqlite"), "--pipeline", "3")
    assert "**Reuse faults**" in report.stdout
    faults = [line for line in report.stdout.splitlines() if line.startswith("> - ")]
    assert len(faults) == 1 and f"{BLIND} (CPU-PyTorch): reused by key from #" in faults[0]
    assert "but it failed when run for real by bot audit-reuse (seed 7)" in faults[0]

    done, out = run(tmp_path, "c4")  # the faulted test is never reused by key again
    assert done.returncode == 1 and executed(out) == ["test_reads_a_file_the_key_cannot_see"]
    assert reused(tmp_path, 4) == {"test_plain": (1, "key")}


def test_the_sample_is_seeded_and_at_least_one_test() -> None:
    items = [("S", f"t{i}", 1) for i in range(40)]
    assert sample(items, 0.05, 3) == sample(items, 0.05, 3)
    assert len(sample(items, 0.05, 3)) == 2 and len(sample(items[:5], 0.05, 3)) == 1
    assert sample(items, 0.0, 3) == [] and sample([], 1.0, 3) == []
    assert {tuple(sample(items, 0.05, seed)) for seed in range(20)} != {
        tuple(sample(items, 0.05, 0))
    }


def test_the_rate_comes_from_the_settings_and_a_bad_one_is_refused(tmp_path) -> None:
    repo(tmp_path)
    assert run(tmp_path, "c1")[0].returncode == 0
    assert run(tmp_path, "c2")[0].returncode == 0
    settings = tmp_path / "stagebot.yml"
    settings.write_text("reuse_audit_rate: 0.5\n")
    half = audit(tmp_path, 2, "--config", str(settings))
    assert "audited 1 (rate 0.5, seed 2)" in half.stdout, half.stdout + half.stderr
    settings.write_text("reuse_audit_rate: 2\n")
    bad = audit(tmp_path, 2, "--config", str(settings))
    assert bad.returncode == 2 and "reuse_audit_rate must be a number from 0 to 1" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_stage_jobs_own_audit_is_checked_recorded_and_loud_in_the_report(tmp_path) -> None:
    """Main's pipelines audit themselves (harness/reuse/sampled.py): the stage job runs a
    sampled test it would have reused and says so in keys.json; the trusted side keeps only
    the audits of tests the ledger offers, records a failure as a reuse fault, and the report
    says "Reuse audit: N sampled, M disagreed", in bold when one disagreed."""
    from stagebot.harness.ledger.book import Ledger
    from stagebot.harness.results import StageResult, TestOutcome
    from stagebot.harness.reuse.offers import KEYS_FILE, read_keys
    from stagebot.harness.reuse.sampled import record_shard_audit

    repo(tmp_path)
    assert run(tmp_path, "c1")[0].returncode == 0
    assert run(tmp_path, "c2")[0].returncode == 0  # pipeline #2 may be offered #1's passes
    shard = tmp_path / "shard"
    shard.mkdir()
    claims = {BLIND: [1, 0.0], "tests/test_blind.py::test_unknown": [1, 0.0]}
    (shard / KEYS_FILE).write_text(
        json.dumps({"family": "CPU-PyTorch", "audited": claims, "audit": [0.5, 2], "keys": []})
    )
    result = StageResult(
        "CPU-PyTorch-1", 1, 1, "FAILED", None, None, 0.1, "CPU", [],
        tests=[TestOutcome(BLIND, "failed", 0.1, "AssertionError: '2' == '1'")],
    )  # fmt: skip
    with Ledger.open(tmp_path / "ledger.sqlite") as book:
        keyed = read_keys(shard, "CPU-PyTorch-1", book, 2, "main")
        assert keyed is not None and keyed.audited == {BLIND: (1, 0.0)}  # no pass of the other
        assert keyed.audit == (0.5, 2)
        faults = record_shard_audit(book, 2, result, "CPU-PyTorch", keyed.audited, keyed.audit)
        assert faults == [
            f"{BLIND} (CPU-PyTorch-1), reused from #1: it failed when run for real by the stage "
            "job's reuse audit (seed 2): AssertionError: '2' == '1'"
        ]
        assert [f[1] for f in book.reuse_faults()] == [BLIND]

    report = bot("report", "--ledger", str(tmp_path / "ledger.sqlite"), "--pipeline", "2")
    assert "**Reuse audit: 1 sampled, 1 disagreed.**" in report.stdout
    assert "**Reuse faults**" in report.stdout
    done, out = run(tmp_path, "c3")  # the faulted test is never reused by key again
    assert "test_reads_a_file_the_key_cannot_see" in executed(out)
