"""One equivalence case (a family's spec x a named dist config): the IR against HF once, in this
process, then every sharded check in one spawn of the config's ranks (NCCL if enough GPUs).

Report: check name (``<variant>/<check>``) -> results, one per rank, except ``<variant>/
matches-hf``, which runs once here (``SINGLE_PROCESS_CHECKS``).
"""

from __future__ import annotations

import time

from stagebot.harness.suites.sharding_ir.checks import CheckResult
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.limits import SpawnLimits
from stagebot.harness.suites.sharding_ir.registry import ModelSpec

MATCHES_HF = "matches-hf"
SINGLE_PROCESS_CHECKS = (MATCHES_HF,)


def run_case(
    spec: ModelSpec, config: str, limits: SpawnLimits | None = None, gloo_dtype: str = "fp32"
) -> dict[str, list[CheckResult]]:
    import torch

    from stagebot.harness.suites.sharding_ir.hf_reference import matches_hf_check
    from stagebot.harness.suites.sharding_ir.spawn import run_on_ranks
    from stagebot.harness.suites.sharding_ir.worker import run_equivalence

    dc = DistConfig.named(config)
    report = {
        f"{name}/{MATCHES_HF}": [matches_hf_check(spec, overrides)]
        for name, overrides in spec.cases(dc)
    }
    backend = "nccl" if torch.cuda.device_count() >= dc.world_size else "gloo"
    start = time.perf_counter()
    per_rank = run_on_ranks(
        run_equivalence, dc.world_size, (spec, config, gloo_dtype), backend=backend, limits=limits
    )
    seconds = time.perf_counter() - start
    print(
        f"[sharding_ir] {spec.model_id} {config}: {dc.world_size} ranks ({backend}) "
        f"in {seconds:.1f} s"
    )
    return report | {check: [r[check] for r in per_rank] for check in per_rank[0]}
