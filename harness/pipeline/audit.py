"""The reuse audit (`bot audit-reuse`): run a seeded sample of a pipeline's tests that were
reused by key, for real, and record each disagreement as a reuse fault.

A test reused by key stands for a pass; the audit runs it on this checkout (its stage's shard,
selecting just the sampled tests: the stage's suites, options and waives) and a test that fails
or errors is a fault: ``Ledger.record_fault`` records it, the test is never reused by key again
(its key is as good as conservative from then on: it re-runs on every new commit) and the
pipeline's report lists it. The sample (rate, seed, the tests chosen, what each did) is kept in
the pipeline's ``meta["reuse_audits"]``, so an audit can be repeated exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from stagebot.harness.reuse.sampled import DISAGREE, META, fault_detail, sample
from stagebot.harness.run.gpus import describe, detect_devices
from stagebot.harness.run.placement import missing_hardware, serving
from stagebot.harness.run.shard import ShardContext, run_shard
from stagebot.stages.errors import StagebotError
from stagebot.stages.matrix import matrix_entries
from stagebot.stages.names import stage_family


class AuditError(StagebotError):
    """The audit cannot start: the pipeline is unknown or has no plan."""


@dataclass(frozen=True)
class Audit:
    pipeline: int
    rate: float
    seed: int
    reused: int  # tests reused by key in the pipeline
    outcomes: dict[tuple[str, str], str]  # (stage, test id) sampled -> what it did for real
    faults: list[str]  # one line per disagreement (recorded)
    not_here: dict[str, str]  # stage -> why its sampled tests could not run on this host

    def lines(self) -> list[str]:
        head = (
            f"pipeline #{self.pipeline}: {self.reused} test(s) reused by key; audited "
            f"{len(self.outcomes)} (rate {self.rate:g}, seed {self.seed})"
        )
        body = [
            f"  {test} ({stage}): {outcome}" for (stage, test), outcome in self.outcomes.items()
        ]
        body += [f"  not audited here: {stage}: {why}" for stage, why in self.not_here.items()]
        tail = [f"reuse fault: {line}" for line in self.faults] or [
            "no disagreement: every audited test passed for real"
            if self.outcomes
            else "nothing was audited"
        ]
        return [head, *body, *tail]


def audit_reuse(
    book, number: int, catalog, root: Path, out: Path, *, rate: float, seed: int | None = None
) -> Audit:
    """Audit pipeline ``number`` of ``book`` on the checkout ``root`` (shard folders under
    ``out``); ``seed`` defaults to the pipeline's number (the same sample every time)."""
    record = book.pipeline(number, with_results=False)
    if record is None:
        raise AuditError(book.unknown_pipeline(number))
    plan = record.planned
    if plan is None:
        raise AuditError(f"pipeline #{number} has no plan (a reuse-pipeline validation)")
    seed = number if seed is None else seed
    reused = book.key_reused(number)
    chosen = sample(reused, rate, seed)
    entries = {e.stage: e for e in matrix_entries(plan, catalog, number, ("run", "reuse"))}
    devices = detect_devices()
    outcomes: dict[tuple[str, str], str] = {}
    faults, not_here = [], {}
    for stage in sorted({stage for stage, _, _ in chosen}):
        tests = {test: source for s, test, source in chosen if s == stage}
        entry = entries.get(stage)
        have = len(serving(entry, devices)) if entry and entry.gpu_count else 1
        why = (
            "the stage is no longer in the catalog"
            if entry is None
            else missing_hardware(entry, have, describe(devices))
        )
        if why:
            not_here[stage] = why
            continue
        entry = replace(entry, tests=sorted(tests), reused_tests=[], reuse_from=None, key_reuse={})
        gpus = tuple(serving(entry, devices)[: entry.gpu_count])
        result = run_shard(entry, ShardContext(out_dir=out / stage, root=root, devices=gpus))
        ran = {t.test_id: t for t in result.tests}
        for test, source in tests.items():
            got = ran.get(test)
            outcomes[(stage, test)] = got.outcome if got else "not run (not collected here)"
            if got is not None and got.outcome in DISAGREE:
                detail = fault_detail(got.outcome, got.evidence, seed, "bot audit-reuse")
                book.record_fault(stage_family(stage), test, number, source, detail)
                faults.append(f"{test} ({stage}), reused from #{source}: {detail}")
    audit = Audit(number, rate, seed, len(reused), outcomes, faults, not_here)
    book.add_meta(
        number,
        META,
        {
            "rate": rate,
            "seed": seed,
            "outcomes": [[stage, test, got] for (stage, test), got in outcomes.items()],
            "faults": faults,
        },
    )
    return audit
