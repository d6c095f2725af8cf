"""A multi-shard family's tests, collected once (its split: harness.pipeline.placement).

``pytest --collect-only -q`` lists the family's test ids (from the repository root, with the
suites' arguments); ``stages.sharding.least_duration`` splits them. The executor passes the
ledger's recorded durations; a fan-out job without a ledger splits on equal weights, so every job
of one family computes the same split.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from stagebot.harness.analysis.causes import (
    TAIL_BYTES,
    environment_cause,
    error_evidence,
    unusable_interpreter,
)
from stagebot.harness.run.shard import pytest_argv
from stagebot.stages.plan import MatrixEntry

COLLECT_TIMEOUT_S = 600


class CollectError(Exception):
    """The family's tests could not be listed (the message is the shard's ERROR evidence)."""


def collect_tests(entry: MatrixEntry, root: Path, python: str = sys.executable) -> list[str]:
    ids: list[str] = []
    for argv in pytest_argv(entry, python):
        try:
            done = subprocess.run(
                [*argv, "--collect-only"],
                cwd=root,
                env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
                capture_output=True,
                text=True,
                timeout=COLLECT_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise CollectError(
                f"timeout: collecting {entry.stage}'s tests took over {COLLECT_TIMEOUT_S} s"
            ) from None
        except OSError as error:
            raise CollectError(unusable_interpreter(python, error)) from None
        if done.returncode not in (0, 5):
            tail = (done.stdout + done.stderr)[-TAIL_BYTES:]
            problem = (
                f"crashed: collecting {entry.stage}'s tests failed (pytest exit {done.returncode})"
            )
            cause = environment_cause(tail, python, root)
            raise CollectError(error_evidence(problem, tail, cause))
        ids += [line.strip() for line in done.stdout.splitlines() if "::" in line]
    return list(dict.fromkeys(ids))
