"""The pipeline ledger: every pipeline, its shards' StageResults and per-test outcomes, in SQLite.

One data model, locally (a file) and in Actions (the file travels between a PR's pipelines as an
artifact). WAL mode and short ``BEGIN IMMEDIATE`` transactions make it safe under concurrent
``bot`` processes: each gets its own pipeline number. A ledger that stays locked past the busy
timeout, is corrupt, or cannot be written raises ``LedgerError`` (exit 3) before anything runs,
and the file is left as it was.

API (also used by the GitHub adapter)::

    ledger = Ledger.open(path)                      # or readonly=True; `with` closes it
    number = ledger.start_pipeline(commit=..., command=..., plan=..., pr=..., branch=...)
    ledger.record_result(number, result, logs={test_id: text}, reused_tests={test_id: (n, s)})
    ledger.finish_pipeline(number, "SUCCESS")
    record = ledger.pipeline(number)                # PipelineRecord, with its StageResults
    ledger.prior_shard(stage, commit, pipeline)     # the planner's History protocol
    ledger.durations("CPU-PyTorch")                 # test id -> seconds, for shard splitting
    ledger.pinned_split(family, commit, digest, n)  # the split earlier runs on this commit used
    ledger.base_pipeline(base_commit, "main")       # the pipeline failures are compared with
    ledger.test_outcomes(n)                         # (stage family, test id) -> outcome
    ledger.test_history("main") / failure_evidence("main")  # harness/analysis/flakiness.py reads
    ledger.latest_validating(pr) / record_validated(...)    # what harness/reuse/policy.py uses
    ledger.trusted_passes(family, pr=..., branch=..., default_branch="main")  # reuse by key
    ledger.latest_key(test_id) / key_reuse_sources(n) / record_fault(...) / reuse_faults()

The store holds no policy: which pipeline may validate a commit (harness/reuse/policy.py) and
which tests are flaky (harness/analysis/flakiness.py) are decided over what it returns.
"""

from __future__ import annotations

from stagebot.harness.ledger.pipelines import Pipelines
from stagebot.harness.ledger.tests import Tests


class Ledger(Pipelines, Tests):
    """The pipeline ledger: pipelines (``pipelines.py``), their shards and tests (``tests.py``),
    the tests' dependency keys (``keys.py``), over one SQLite file (``store.py``)."""
