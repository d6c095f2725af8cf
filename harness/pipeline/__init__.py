"""A pipeline's life, written once for `bot run` (this host) and `bot publish` (GitHub Actions).

- ``lifecycle``: start a pipeline from its Plan, finish it (state, report, ledger), abort it;
- ``recording``: one shard's result into the ledger (its test logs, the tests it reused);
- ``intake``: the stage jobs' result folders, checked against the plan, recorded;
- ``hardware``: whether this host can run a shard, and a split family's share of the tests;
- ``status_text``: the gating status' text (formatter and parser: the one protocol).
"""
