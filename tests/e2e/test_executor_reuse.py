"""Reuse stays sound when a multi-shard family is split again (a failing test never hides).

The family's tests: a, c, d quick; b takes 1.5 s and fails when $STAGEBOT_FIXTURE_BROKEN is set.
Split by equal weights, pipeline #1 runs {a, c} and {b, d}; split again by the recorded
durations, b alone would fill shard 1, which #1 passed — so shard 1 must not be reused blindly.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from fixtures.botrun import CATALOG as FIXTURE_CATALOG
from fixtures.botrun import bot, results, run_stages
from helpers.distributions import install_distribution

pytestmark = pytest.mark.slow

BROKEN = {"STAGEBOT_FIXTURE_BROKEN": "1"}
CATALOG = """
gpu_types:
  CPU: {device_names: [], runner_labels: [ubuntu-latest]}
families:
  - name: CPU-PyTorch
    kind: test
    shards: 2
    timeout_minutes: 2
    suites: [{path: tests/fixtures/suites/check_resplit.py}]
"""


def _run(tmp: Path, out: str):
    return bot(
        "run",
        "--catalog",
        str(tmp / "catalog.yaml"),
        "--ledger",
        str(tmp / "ledger.sqlite"),
        "--commit",
        "abc1234",
        "--out",
        str(tmp / out),
        "/bot run",
        env=BROKEN,
    )


def _executed(out: Path) -> dict[str, str]:
    return {
        t["test_id"].split("::")[1]: t["outcome"]
        for result in results(out).values()
        for t in result["tests"]
    }


@pytest.mark.parametrize("pinned", [True, False], ids=["split-pinned", "split-not-recorded"])
def test_a_failing_test_moved_by_a_new_split_is_never_reused(tmp_path, pinned) -> None:
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    first = _run(tmp_path, "out1")
    assert first.returncode == 1, first.stdout + first.stderr
    assert _executed(tmp_path / "out1")["test_b"] == "failed"
    if not pinned:  # a ledger written before splits were recorded: the executor must still check
        with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
            db.execute("UPDATE pipelines SET meta = json_remove(meta, '$.splits')")

    second = _run(tmp_path, "out2")
    assert second.returncode == 1, second.stdout + second.stderr
    assert "state FAILURE" in second.stdout and "state SUCCESS" not in second.stdout
    assert _executed(tmp_path / "out2")["test_b"] == "failed"  # b ran again, and failed
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
        metas = [json.loads(m) for (m,) in db.execute("SELECT meta FROM pipelines ORDER BY id")]
    if pinned:  # the same split both times: shard 1 ({a, c}) is reused, shard 2 re-runs b
        assert metas[0]["splits"] == metas[1]["splits"]
        assert "| CPU-PyTorch-1 | REUSED |" in second.stdout
        assert set(_executed(tmp_path / "out2")) == {"test_b"}


def test_a_reused_out_folder_lends_no_stale_results(tmp_path) -> None:
    from fixtures.botrun import run_stages

    ledger, out = tmp_path / "ledger.sqlite", tmp_path / "out"
    assert run_stages(ledger, out, "CPU-PyTorch-Fail-1").returncode == 1
    shard = out / "CPU-PyTorch-Fail-1"
    (shard / "rerun-3.jsonl").write_text('{"event": "result"}\n')
    (shard / "raw" / "ghost.xml").write_text("<testsuite/>")
    # The same commit and the same --out: per-test reuse re-runs only the two failed tests.
    second = run_stages(ledger, out, "CPU-PyTorch-Fail-1")
    assert second.returncode == 1, second.stdout + second.stderr
    ran = results(out)["CPU-PyTorch-Fail-1"]
    assert sorted(t["test_id"].split("::")[1] for t in ran["tests"]) == [
        "test_numeric_mismatch",
        "test_wrong_sum",
    ]  # not the first run's test_passes, streamed into the same tests.jsonl
    stream = (shard / "tests.jsonl").read_text()
    assert "test_passes" not in stream and stream.count('"session_end"') == 1
    assert not (shard / "rerun-3.jsonl").exists() and not (shard / "raw" / "ghost.xml").exists()
    assert (shard / "log.txt").read_text().count("$ ") == 3  # this run's pytest and 2 re-runs


def test_run_stage_takes_the_gpu_type_from_the_entry_not_the_default_catalog(tmp_path) -> None:
    """A GPU type only a custom catalog knows: the entry carries its device names."""
    import os

    from fixtures.botrun import ROOT

    from stagebot.stages.catalog import load_catalog
    from stagebot.stages.matrix import matrix_entries
    from stagebot.stages.plan import Plan

    smi = tmp_path / "bin" / "nvidia-smi"  # this host "has" one GPU of a type no default knows
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho '0, ACME Widget 9000'\n")
    smi.chmod(0o755)
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "gpu_types:\n"
        "  CPU: {device_names: [], runner_labels: [ubuntu-latest]}\n"
        "  WIDGET: {device_names: ['ACME Widget*'], runner_labels: [self-hosted]}\n"
        "families:\n"
        "  - {name: WIDGET-PyTorch, kind: test, timeout_minutes: 2,\n"
        "     suites: [{path: tests/fixtures/suites/check_toggle.py}]}\n"
    )
    plan = json.loads(bot("dry-run", "--json", "--catalog", str(catalog), "/bot run").stdout)
    (entry,) = matrix_entries(Plan.from_json(plan), load_catalog(catalog), 4)
    assert entry.device_names == ["ACME Widget*"]
    env = {"PATH": f"{smi.parent}{os.pathsep}{os.environ['PATH']}"}
    env["CUDA_VISIBLE_DEVICES"] = "0"
    done = bot(
        "run-stage", "--entry", json.dumps(entry.to_json()), "--out", str(tmp_path / "out"), env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = results(tmp_path / "out")["WIDGET-PyTorch-1"]
    assert result["state"] == "SUCCESS" and result["gpus"] == ["0"], result
    assert (ROOT / "stages" / "catalog").is_dir()  # the default catalog exists, and was not asked


def test_dry_run_reads_bot_runs_default_ledger(tmp_path) -> None:
    """Without --ledger both use the repository's default ledger: dry-run shows the reuse that
    run would do."""
    from fixtures.botrun import CATALOG, ROOT
    from helpers.cli import bot_process

    from stagebot.harness.ledger.location import default_ledger

    def bot_here(*args: str):
        return bot_process(*args, cwd=tmp_path)

    comment = '/bot run --stage-list "CPU-Build_Check"'
    common = ["--catalog", str(CATALOG), "--commit", "c0ffee"]
    before = bot_here("dry-run", *common, comment)
    assert before.returncode == 0 and "no result for this stage on c0ffee" in before.stdout
    ledger = default_ledger(tmp_path)
    assert not ledger.exists()  # dry-run creates no ledger
    done = bot_here("run", *common, "--root", str(ROOT), "--out", str(tmp_path / "o"), comment)
    assert done.returncode == 0, done.stdout + done.stderr
    snapshot = ledger.read_bytes()
    after = bot_here("dry-run", *common, comment)
    assert after.returncode == 0, after.stderr
    assert "passed in #1 on c0ffee" in after.stdout and "1 reused" in after.stdout
    assert ledger.read_bytes() == snapshot  # read-only


def test_a_pass_on_the_same_commit_is_not_reused_in_a_changed_environment(tmp_path) -> None:
    """Installing a distribution between two runs of one commit re-runs the shard, saying what
    changed; the next run in that environment reuses it again."""
    ledger, stage = tmp_path / "ledger.sqlite", "CPU-PyTorch-1"
    assert run_stages(ledger, tmp_path / "out1", stage).returncode == 0
    env = {"PYTHONPATH": str(install_distribution(tmp_path / "site", "environment-probe"))}
    where = ["--catalog", str(FIXTURE_CATALOG), "--ledger", str(ledger), "--commit", "c0ffee"]
    planned = bot("dry-run", *where, f'/bot run --stage-list "{stage}"', env=env)
    assert "the environment changed since #1: environment-probe 0.0.1 (new)" in planned.stdout
    assert run_stages(ledger, tmp_path / "out2", stage, env=env).returncode == 0
    assert results(tmp_path / "out2")[stage]["state"] == "SUCCESS"
    again = run_stages(ledger, tmp_path / "out3", stage, env=env)
    assert again.returncode == 0
    assert f"| {stage} | REUSED |" in again.stdout
