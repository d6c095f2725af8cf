"""A matrix entry of one test shard, for running `run_shard` on a repository of one suite."""

from __future__ import annotations

from stagebot.stages.plan import MatrixEntry


def entry(stage: str = "CPU-PyTorch-1") -> MatrixEntry:
    """Shard 1/1 of ``stage``: check_suite.py on the CPU, every test run."""
    return MatrixEntry(
        pipeline=1, commit=None, pr=None, stage=stage, shard=1, shards=1, kind="test",
        gpu_type="CPU", gpu_count=0, runner_labels=[], timeout_minutes=2,
        suites=[{"path": "check_suite.py"}], command=None, tests=[], reused_tests=[],
        reuse_from=None, waives=[], catalog_digest="0",
    )  # fmt: skip
