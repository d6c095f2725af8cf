"""Turn a Plan's shards to run into CI fan-out matrix entries (one job per shard)."""

from __future__ import annotations

from stagebot.stages.catalog import Catalog
from stagebot.stages.plan import MatrixEntry, Plan


def matrix_entries(
    plan: Plan, catalog: Catalog, pipeline: int, actions: tuple[str, ...] = ("run",)
) -> list[MatrixEntry]:
    """One entry per shard the plan runs: the job needs no ledger and no catalog to run it.

    ``actions``: the plan actions to include (the local executor also asks for "reuse" shards,
    to check after splitting a family that a reused shard's share really passed)."""
    options = plan.parsed_command().run
    detailed_log, debug = (options.detailed_log, options.debug) if options else (False, False)
    entries = []
    for shard in (shard for shard in plan.shards if shard.action in actions):
        gpu_type = catalog.gpu_types[shard.gpu_type]
        entries.append(
            MatrixEntry(
                pipeline=pipeline,
                commit=plan.commit,
                pr=plan.pr,
                stage=shard.stage,
                shard=shard.shard,
                shards=shard.shards,
                kind=shard.kind,
                gpu_type=shard.gpu_type,
                gpu_count=shard.gpu_count,
                runner_labels=list(gpu_type.runner_labels),
                device_names=list(gpu_type.device_names),
                timeout_minutes=shard.timeout_minutes,
                max_reruns=shard.max_reruns,
                rerun_max_failures=shard.rerun_max_failures,
                setup=catalog.stage(shard.stage).setup.to_json(),
                suites=shard.suites,
                command=shard.command,
                tests=[],
                reused_tests=shard.reused_tests,
                reuse_from=shard.reuse_from,
                waives=[
                    {"test_id": w.test_id, "reason": w.reason}
                    for w in catalog.waives_for(shard.gpu_type)
                ],
                catalog_digest=plan.catalog_digest,
                detailed_log=detailed_log,
                debug=debug,
            )
        )
    return entries
