"""The per-rank check list of one model / dist config, run inside one spawn.

Per variant (the default tiny config, then each registered variant that applies to the config):
build, re-init identically, eager unsharded forward (the reference), snapshot, export, apply +
strip the hints, check hints/shapes/collectives, poison every weight and load the full snapshot
(hooks slice it), sharded forward vs reference, reload the rank's own sharded state dict. On the
default config, three negative controls whose checks must fail. Device and dtype follow the
backend: NCCL -> the rank's GPU in bf16, gloo -> CPU in fp32.
"""

from __future__ import annotations

import copy
import warnings

import torch
import torch.distributed as dist

from stagebot.harness.suites.sharding_ir import sabotage
from stagebot.harness.suites.sharding_ir.build import build_ir_model, prefill_inputs
from stagebot.harness.suites.sharding_ir.checks import (
    CheckResult,
    collective_count_check,
    hint_count,
    local_shape_check,
    numeric_check,
)
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.registry import ModelSpec, lookup
from stagebot.harness.suites.sharding_ir.sharding import apply_sharding_hints, strip_sharding_hints

DEFAULT = "default"
CONTROLS = ("control-no-collectives", "control-wrong-split-dim", "control-extra-collective")
# Controls that apply only where the model has what they break (must then be present).
MOE_CONTROLS = ("control-routing-mask-removed",)


def run_equivalence(rank: int, model_id: str, dist_config: str) -> dict[str, CheckResult]:
    """Check name (``<variant>/<check>``) -> this rank's result."""
    dc = DistConfig.named(dist_config, rank)
    if dist.get_world_size() != dc.world_size:
        raise RuntimeError(
            f"{dist_config} needs {dc.world_size} ranks, got {dist.get_world_size()}"
        )
    if dist.get_backend() == "nccl":
        device, dtype = torch.device("cuda", torch.cuda.current_device()), torch.bfloat16
    else:
        device, dtype = torch.device("cpu"), torch.float32
    spec = lookup(model_id)
    report = _check_variant(spec, DEFAULT, {}, dc, device, dtype)
    for name, variant in spec.variants.items():
        overrides = variant(dc)
        if overrides is not None:
            report |= _check_variant(spec, name, overrides, dc, device, dtype)
    return report


@torch.no_grad()
def _check_variant(
    spec: ModelSpec, name: str, overrides: dict, dc: DistConfig, device, dtype
) -> dict[str, CheckResult]:
    model = build_ir_model(spec, overrides, fixed_routing=True).to(device=device, dtype=dtype)
    ids, pos = (t.to(device) for t in prefill_inputs(model.config.vocab_size))
    reference = model(ids, pos)
    snapshot = {k: v.clone() for k, v in model.state_dict().items()}
    gm = torch.export.export(model, (ids, pos)).module()
    hints_before = hint_count(gm)
    strip_sharding_hints(apply_sharding_hints(gm, dc))
    shapes, collectives = model.expected_local_shapes(dc), model.expected_collectives(dc)
    r = {
        "hints-lowered": CheckResult(
            hints_before > 0 and hint_count(gm) == 0,
            f"{hints_before} hint nodes exported, {hint_count(gm)} left after strip",
        ),
        "local-shapes": local_shape_check(gm, shapes),
        "collective-counts": collective_count_check(gm, collectives),
    }

    sabotage.poison_(gm)
    missing, unexpected = gm.load_state_dict(snapshot, strict=False)
    dropped = sorted(k for k, shape in shapes.items() if shape is None)
    r["load-full-checkpoint"] = CheckResult(
        not missing and sorted(unexpected) == dropped,
        f"missing {missing[:3]}; unexpected {len(unexpected)}, dropped experts {len(dropped)}",
    )
    sharded = gm(ids, pos)
    r["numeric"] = numeric_check(sharded, reference)

    own = {k: v.clone() for k, v in gm.state_dict().items()}
    sabotage.poison_(gm)
    gm.load_state_dict(own, strict=True)
    r["load-sharded-checkpoint"] = CheckResult(
        torch.equal(gm(ids, pos), sharded), "bitwise vs first load"
    )

    if name == DEFAULT:
        broken = _copy(gm)
        removed = sabotage.remove_collectives(broken)
        result = numeric_check(broken(ids, pos), reference)
        r[CONTROLS[0]] = CheckResult(result.ok, f"{removed} collectives removed; {result.detail}")
        broken = _copy(gm)
        param = sabotage.split_on_wrong_dim(broken, snapshot, dc.tp_size, dc.tp_rank)
        result = local_shape_check(broken, shapes)
        r[CONTROLS[1]] = CheckResult(result.ok, f"{param} split on dim 1; {result.detail}")
        broken = _copy(gm)
        sabotage.add_extra_collective(broken)
        r[CONTROLS[2]] = collective_count_check(broken, collectives)
        broken = _copy(gm)
        unmasked = sabotage.remove_routing_mask(broken)
        if unmasked:
            result = numeric_check(broken(ids, pos), reference)
            r[MOE_CONTROLS[0]] = CheckResult(
                result.ok, f"{unmasked} routing masks removed; {result.detail}"
            )
    return {f"{name}/{check}": result for check, result in r.items()}


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    with warnings.catch_warnings():  # torch's own pytree specs warn when deep-copied
        warnings.simplefilter("ignore", FutureWarning)
        return copy.deepcopy(gm)
