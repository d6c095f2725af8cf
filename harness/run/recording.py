"""One shard's result into the ledger: the same for a shard run here and one a stage job ran.

A result carries the logs of its failed tests (from ``tests.jsonl`` beside it) and, for a shard
that skipped tests that passed before, those tests: they count as passed on this commit for
the next pipeline's reuse. A shard the plan reuses becomes a REUSED result whose passed tests
are copied from its source pipeline.
"""

from __future__ import annotations

from pathlib import Path

from stagebot.harness.ledger.store import retry_busy
from stagebot.harness.results import StageResult
from stagebot.harness.reuse.offers import Keyed
from stagebot.harness.reuse.sampled import record_shard_audit
from stagebot.harness.run.shard import placeholder_result
from stagebot.harness.run.streams import read_stream
from stagebot.stages.names import stage_family

Passed = dict[str, tuple[int, float]]  # test id -> (pipeline it passed in, its duration)


def record_result(
    book,
    number: int,
    result: StageResult,
    *,
    logs=None,
    reused: Passed | None = None,
    keyed: Keyed | None = None,
) -> None:
    """Store ``result`` as pipeline ``number``'s (waiting out a busy ledger), with the tests it
    reused by key and its tests' keys (``keyed``, from its ``keys.json``), and the audit of the
    tests it ran instead of reusing them (``harness/reuse/sampled.py``)."""
    retry_busy(
        lambda: book.record_result(
            number,
            result,
            logs=logs or {},
            reused_tests=reused,
            key_reused=keyed.reused if keyed else None,
            keys=keyed.keys if keyed else (),
            key_files=keyed.files if keyed else None,
        )
    )
    if keyed is not None and keyed.audited:
        family = stage_family(result.stage)
        retry_busy(
            lambda: record_shard_audit(book, number, result, family, keyed.audited, keyed.audit)
        )


def failure_logs(stream: Path) -> dict[str, str]:
    """test id -> the log of each test that left one in the ``tests.jsonl`` at ``stream``.
    Raises ValueError / OSError for a stream that cannot be read (the caller decides)."""
    return {t: r["log"] for t, r in read_stream(stream).results.items() if r.get("log")}


def logs_of(result: StageResult) -> dict[str, str]:
    """The failure logs of a shard run on this host (its ``tests.jsonl`` is beside its log);
    none when the stream is gone."""
    if not result.log_path:
        return {}
    try:
        return failure_logs(Path(result.log_path).with_name("tests.jsonl"))
    except OSError:
        return {}


def reused_result(shard) -> StageResult:
    """The REUSED result of a shard (a PlannedShard or MatrixEntry) the plan reuses."""
    return placeholder_result(
        shard, "REUSED", f"passed in #{shard.reuse_from}; not re-run", shard.reuse_from
    )


def passed_tests(book, stage: str, source: int | None) -> Passed:
    """The tests of ``stage`` that passed in pipeline ``source`` (none without a ledger or a
    source): what a reused shard, or a shard's reused tests, carry forward."""
    if book is None or source is None:
        return {}
    return book.passed_tests(source, stage)
