"""Failure analysis: a category and one line of real evidence per failed, flaky or waived test.

| category     | meaning                                              | pipeline         |
|--------------|------------------------------------------------------|------------------|
| NEW          | fails here, passed in the base pipeline              | FAILURE (exit 1) |
| PRE-EXISTING | also fails in the base pipeline                      | FAILURE (exit 1) |
| UNCLASSIFIED | no base pipeline (or the base did not run the test)  | FAILURE (exit 1) |
| FLAKY        | failed, then passed on a re-run                      | SUCCESS          |
| INFRA        | timeout, OOM, NCCL/distributed error, crashed worker | FAILURE (exit 3) |
| WAIVED       | skipped by the waives file                           | not a failure    |

INFRA is decided first (from the start of an evidence line: the executor writes ``timeout:`` /
``crashed:`` / ``corrupt output:`` / ``environment:``, an infrastructure exception's name, or an
error message that opens with an OOM / NCCL signature; never an AssertionError line), then the
base comparison.
Pipeline state and exit code: any NEW / PRE-EXISTING / UNCLASSIFIED -> FAILURE, 1; only
INFRA -> FAILURE, 3; cancelled -> ABORTED, 1; otherwise SUCCESS, 0. NEW failures list "suspects":
the PR's changed files that the stage's ``run_if_changed`` patterns or the test's own folder point
to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from stagebot.harness.causes import cause_line
from stagebot.harness.evidence import Mismatch, mismatch
from stagebot.harness.results import StageResult, TestOutcome
from stagebot.stages.patterns import path_matches

CATEGORIES = ("NEW", "PRE-EXISTING", "UNCLASSIFIED", "INFRA", "FLAKY", "WAIVED")
BLOCKING = ("NEW", "PRE-EXISTING", "UNCLASSIFIED")
# INFRA is read from the start of an evidence line: the executor's own prefixes, the names of
# infrastructure exceptions, or an exception whose message opens with a known signature. A line
# that merely mentions such a word (an assertion about NCCL calls, say) is not infrastructure.
_PREFIXES = r"(?:timeout|crashed|corrupt output|environment):"
_EXCEPTIONS = (
    r"(?:[\w.]+\.)?(?:OutOfMemoryError|DistBackendError|DistNetworkError|DistStoreError|"
    r"ChildFailedError|NcclError|NCCLError)\b"
)
_SIGNATURES = (
    r"(?:(?:[\w.]+\.)?\w*(?:Error|Exception):\s*)?(?i:CUDA out of memory|"
    r"CUDA error: out of memory|out of memory|NCCL (?:error|communicator|timeout)|ProcessGroupNCCL|"
    r"\[Rank \d+\] Watchdog|Killed by signal|worker (?:\w+ )?(?:died|crashed|exited))"
)
INFRA_LINE = re.compile(rf"^\s*(?:{_PREFIXES}|{_EXCEPTIONS}|{_SIGNATURES})")
ASSERTION_LINE = re.compile(r"^\s*(?:E\s+)?(?:(?:[\w.]+\.)?AssertionError\b|assert\b)")


@dataclass(frozen=True)
class Failure:
    stage: str
    test_id: str
    category: str
    evidence: str
    attempts: int = 1
    mismatch: Mismatch | None = None
    suspects: tuple[str, ...] = ()
    note: str | None = None  # e.g. "also failing on base #12"
    log: str | None = None


@dataclass(frozen=True)
class Analysis:
    failures: list[Failure]
    state: str  # SUCCESS | FAILURE | ABORTED
    exit_code: int
    base_pipeline: int | None
    not_run: list[tuple[str, str]] = field(default_factory=list)  # (stage, why)

    def of(self, category: str) -> list[Failure]:
        return [failure for failure in self.failures if failure.category == category]

    def counts(self) -> dict[str, int]:
        return {category: len(self.of(category)) for category in CATEGORIES}


def is_infra(evidence: str | None) -> bool:
    """Whether a line of ``evidence`` opens with an infrastructure signature (never an
    assertion: a test's own check about OOM or NCCL is the code's failure)."""
    return any(
        INFRA_LINE.match(line) and not ASSERTION_LINE.match(line)
        for line in (evidence or "").splitlines()
    )


def analyse(
    results: list[StageResult],
    *,
    base: Mapping[str, TestOutcome] | None = None,
    base_pipeline: int | None = None,
    changed_files: list[str] | None = None,
    stage_paths: Mapping[str, list[str]] | None = None,
    logs: Mapping[tuple[str, str], str] | None = None,
    cancelled: bool = False,
) -> Analysis:
    """Classify every failed / flaky / waived test of ``results`` against the base outcomes."""
    logs = logs or {}
    failures: list[Failure] = []
    for result in results:
        infra_seen = False
        for test in result.tests:
            failure = _classify(result, test, base, base_pipeline, logs)
            if failure is None:
                continue
            if failure.category == "NEW":
                suspects = _suspects(test.test_id, result.stage, changed_files, stage_paths)
                failure = Failure(**{**failure.__dict__, "suspects": suspects})
            infra_seen |= failure.category == "INFRA"
            failures.append(failure)
        if result.state == "ERROR" and not infra_seen:
            failures.append(
                Failure(
                    result.stage,
                    f"{result.stage} (whole shard)",
                    "INFRA",
                    cause_line(result.evidence) or "the shard ended in ERROR without evidence",
                )
            )
    order = {category: index for index, category in enumerate(CATEGORIES)}
    failures.sort(key=lambda f: (order[f.category], f.stage, f.test_id))
    categories = {failure.category for failure in failures}
    if cancelled:
        state, code = "ABORTED", 1
    elif categories & set(BLOCKING):
        state, code = "FAILURE", 1
    elif "INFRA" in categories:
        state, code = "FAILURE", 3
    else:
        state, code = "SUCCESS", 0
    not_run = [(r.stage, r.evidence or "not run") for r in results if r.state == "NOT_RUN"]
    return Analysis(failures, state, code, base_pipeline, not_run)


def _classify(
    result: StageResult,
    test: TestOutcome,
    base: Mapping[str, TestOutcome] | None,
    base_pipeline: int | None,
    logs: Mapping[tuple[str, str], str],
) -> Failure | None:
    log = logs.get((result.stage, test.test_id))
    common = {"attempts": test.attempts, "mismatch": mismatch(log), "log": log}
    evidence = test.evidence or f"{test.outcome} (no error text was captured)"
    if test.outcome == "waived":
        return Failure(result.stage, test.test_id, "WAIVED", evidence, **common)
    if test.outcome == "flaky":
        return Failure(result.stage, test.test_id, "FLAKY", evidence, **common)
    if test.outcome not in ("failed", "error"):
        return None
    if is_infra(test.evidence):
        return Failure(result.stage, test.test_id, "INFRA", evidence, **common)
    if base is None:
        return Failure(
            result.stage,
            test.test_id,
            "UNCLASSIFIED",
            evidence,
            note="no base pipeline to compare with",
            **common,
        )
    before = base.get(test.test_id)
    if before is None:
        return Failure(
            result.stage,
            test.test_id,
            "UNCLASSIFIED",
            evidence,
            note=f"base #{base_pipeline} did not run this test",
            **common,
        )
    if before.outcome in ("failed", "error"):
        return Failure(
            result.stage,
            test.test_id,
            "PRE-EXISTING",
            evidence,
            note=f"also failing on base #{base_pipeline}",
            **common,
        )
    return Failure(
        result.stage,
        test.test_id,
        "NEW",
        evidence,
        note=f"passed on base #{base_pipeline}" if before.outcome == "passed" else None,
        **common,
    )


def _suspects(
    test_id: str,
    stage: str,
    changed_files: list[str] | None,
    stage_paths: Mapping[str, list[str]] | None,
) -> tuple[str, ...]:
    if not changed_files:
        return ()
    patterns = tuple((stage_paths or {}).get(stage, ()))
    test_file = PurePosixPath(test_id.split("::")[0])
    hits = []
    for path in changed_files:
        changed = PurePosixPath(path)
        if (patterns and path_matches(path, patterns)) or changed == test_file:
            hits.append(path)
        elif "::" in test_id and changed.parent == test_file.parent:
            hits.append(path)
    return tuple(hits)
