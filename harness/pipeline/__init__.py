"""A pipeline's life, written once for `bot run` (this host) and `bot publish` (GitHub Actions).

Each command makes one call here: ``local.run_local`` (`bot run`), ``stage_job.run_entry`` (a
stage job's `bot run-stage`), ``conclude.conclude`` (the report job's `bot publish`, `bot
report-run`). Below those calls:

- ``lifecycle``: start a pipeline from its Plan, finish it (state, report, ledger), abort it;
- ``intake``: the stage jobs' result folders, checked against the plan, recorded;
- ``base``: the pipeline a report compares failures with, chosen the same way everywhere;
- ``worktree``: the code a local run tests (the checkout, its commit, whether it is dirty);
- ``audit``: a sample of the tests a pipeline reused by key, run for real.
"""
