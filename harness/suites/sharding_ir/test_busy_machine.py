"""A busy machine is not a red PR: with two busy processes per core (started and stopped here), a
stage running one family's equivalence case ends SUCCESS, or, where a limit truly runs out, every
failure says it was the limit (``SpawnTimeout``: how long it ran, which limit, the load average)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stagebot.harness.run.shard import ShardContext, run_shard
from stagebot.stages.plan import MatrixEntry

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
FAMILY = "Qwen/Qwen3-8B"  # dense: the cheapest family; tp-only: the cheapest config that shards
HOG_LIFETIME_S = 1800  # a hog ends by itself should this test's process die first
HOG = f"import time\nend = time.monotonic() + {HOG_LIFETIME_S}\nwhile time.monotonic() < end: pass"


@pytest.fixture
def cpu_hogs():
    cores = len(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2 * cores)]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=60)


def _entry() -> MatrixEntry:
    suite = {
        "path": "harness/suites/sharding_ir/test_equivalence.py",
        "args": ["--sharding-ir-model-id", FAMILY, "--sharding-ir-dist-config", "tp-only"],
    }
    return MatrixEntry(
        pipeline=1, commit=None, pr=None, stage="CPU-PyTorch-1", shard=1, shards=1, kind="test",
        gpu_type="CPU", gpu_count=0, runner_labels=[], timeout_minutes=40, suites=[suite],
        command=None, tests=[], reused_tests=[], reuse_from=None, waives=[], catalog_digest="0",
        max_reruns=0,
    )  # fmt: skip


def test_a_stage_under_cpu_hogs_passes_or_says_a_limit_ran_out(cpu_hogs, tmp_path):
    result = run_shard(_entry(), ShardContext(out_dir=tmp_path / "out", root=ROOT))
    assert [hog.poll() for hog in cpu_hogs] == [None] * len(cpu_hogs), "a hog ended early"
    executed = [t for t in result.tests if t.outcome != "skipped"]
    assert len(executed) >= 10, f"{result.state}: {len(executed)} tests ran; {result.evidence}"
    if result.state == "SUCCESS":
        return
    not_the_limit = [
        f"{t.test_id}: {t.outcome}: {t.evidence}"
        for t in result.tests
        if t.outcome not in ("passed", "skipped") and "SpawnTimeout" not in (t.evidence or "")
    ]
    assert not not_the_limit, f"{result.state} under load, not by a limit:\n" + "\n".join(
        not_the_limit
    )
