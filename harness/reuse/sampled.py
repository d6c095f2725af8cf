"""The reuse audit's sample and verdict, shared by `bot audit-reuse` (a pipeline's reused tests
run again, afterwards) and a main-branch pipeline's own audit (its stage jobs run a sample of
the tests they would reuse by key, in the same shard: docs/reuse.md, "The audit").

A sampled test that fails or errors for real disagrees with the pass its key stood for: a
reuse fault (``Ledger.record_fault``: never reused by key again, listed in the report). Each
audit is kept in the pipeline's ``meta["reuse_audits"]``, from which the report says "reuse
audit: N sampled, M disagreed".
"""

from __future__ import annotations

import math
import random

from stagebot.harness.results import StageResult

DISAGREE = ("failed", "error")
META = "reuse_audits"  # the pipeline meta key: one item per audit (a shard's, or bot audit-reuse)


def sample(items: list, rate: float, seed: int) -> list:
    """``ceil(rate * n)`` of ``items`` (at least one when ``rate`` > 0), chosen by ``seed``."""
    if not items or rate <= 0:
        return []
    count = min(len(items), max(1, math.ceil(rate * len(items))))
    return sorted(random.Random(seed).sample(sorted(items), count))


def fault_detail(outcome: str, evidence: str | None, seed: int, by: str) -> str:
    detail = f"it {outcome} when run for real by {by} (seed {seed})"
    return detail + (f": {evidence.splitlines()[0][:200]}" if evidence else "")


def record_shard_audit(
    book,
    number: int,
    result: StageResult,
    family: str,
    audited: dict[str, tuple[int, float]],
    rate_seed: tuple[float, int],
) -> list[str]:
    """Pipeline ``number``'s own audit of one shard: ``audited`` (test id -> the pipeline whose
    pass its key matched) ran in ``result`` instead of being reused; each that failed or errored
    is a reuse fault. Records the audit in the pipeline's meta; returns the fault lines."""
    if not audited:
        return []
    rate, seed = rate_seed
    ran = {t.test_id: t for t in result.tests}
    outcomes, faults = [], []
    for test, (source, _) in sorted(audited.items()):
        got = ran.get(test)
        outcome = got.outcome if got else "not run (not collected)"
        outcomes.append([result.stage, test, outcome])
        if got is not None and got.outcome in DISAGREE:
            detail = fault_detail(got.outcome, got.evidence, seed, "the stage job's reuse audit")
            book.record_fault(family, test, number, source, detail)
            faults.append(f"{test} ({result.stage}), reused from #{source}: {detail}")
    item = {"rate": rate, "seed": seed, "outcomes": outcomes, "faults": faults, "by": "stage job"}
    book.add_meta(number, META, item)
    return faults


def summary(audits: list[dict]) -> tuple[int, int]:
    """(tests sampled, tests that disagreed) over a pipeline's ``meta["reuse_audits"]``."""
    sampled = sum(len(a.get("outcomes") or ()) for a in audits)
    return sampled, sum(len(a.get("faults") or ()) for a in audits)
