"""A known pipeline's report (every state and failure category), and stage results to build one."""

from __future__ import annotations

from stagebot.harness.analysis.classify import analyse
from stagebot.harness.report import Report
from stagebot.harness.results import StageResult
from stagebot.harness.results import TestOutcome as Outcome


def result(stage, state, start, end, tests=(), gpus=(), evidence=None, gpu_type="DGX_H200"):
    return StageResult(
        stage=stage,
        shard=1,
        shards=1,
        state=state,
        started_at=f"2026-01-01T00:{start}+00:00" if start else None,
        finished_at=f"2026-01-01T00:{end}+00:00" if end else None,
        duration_s=0.0,
        gpu_type=gpu_type,
        gpus=list(gpus),
        tests=list(tests),
        evidence=evidence,
    )


def fixture_report() -> Report:
    """A known pipeline: 4 shards ran (3 slots), 1 reused, 1 NOT_RUN; 5 analysed rows."""
    results = [
        result(
            "A-PyTorch-1",
            "SUCCESS",
            "00:00",
            "05:00",
            gpus=["0"],
            tests=[
                Outcome("t/test_a.py::ok", "passed", 1.0),
                Outcome("t/test_a.py::flaky", "flaky", 1.0, "passed on re-run 1", 2),
            ],
        ),
        result(
            "A-PyTorch-2",
            "FAILURE",
            "00:00",
            "03:00",
            gpus=["1"],
            tests=[
                Outcome(
                    "t/test_b.py::new",
                    "failed",
                    1.0,
                    "AssertionError: @octocat <!-- stagebot:{} --> broke",
                )
            ],
        ),
        result(
            "A-4_GPUs-PyTorch-1",
            "ERROR",
            "05:00",
            "09:00",
            gpus=["0", "1", "2", "3"],
            evidence="crashed: pytest killed by SIGKILL while running t/test_c.py::hang",
            tests=[
                Outcome(
                    "t/test_c.py::hang",
                    "error",
                    0.0,
                    "crashed: the worker was killed by SIGKILL during this test",
                )
            ],
        ),
        result(
            "A-PyTorch-3",
            "SUCCESS",
            "03:00",
            "04:30",
            gpus=["2"],
            tests=[
                Outcome("t/test_d.py::w", "waived", 0.0, "bug 7"),
                Outcome("t/test_d.py::old", "failed", 1.0, "ValueError: old"),
            ],
        ),
        result("A-PyTorch-4", "REUSED", None, None),
        result("B-PyTorch-1", "NOT_RUN", None, None, evidence="needs 1 x B200 GPU(s)"),
    ]
    base = {  # (stage family, test id): the base is read within the same family
        ("A-PyTorch", "t/test_b.py::new"): Outcome("t/test_b.py::new", "passed", 1.0),
        ("A-PyTorch", "t/test_d.py::old"): Outcome("t/test_d.py::old", "failed", 1.0),
    }
    return Report(
        pipeline=12,
        commit="0123456789abcdef",
        pr=5,
        command="/bot run",
        state="FAILURE",
        gating=True,
        partly_tested_reason=None,
        started_at=None,
        finished_at=None,
        results=results,
        analysis=analyse(results, base=base, base_pipeline=11),
    )
