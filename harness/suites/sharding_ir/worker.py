"""The per-rank check list of one model / dist config, run inside one spawn.

Per case of the spec (the default tiny config, then each variant that applies to the config):
build, re-init identically, eager unsharded forward (the reference), snapshot, export, apply +
strip the hints, check hints/shapes/collectives (and the rows of weights that follow another's
split, where the graph has any), poison every weight and load the full snapshot (hooks slice it),
sharded forward vs reference, reload the rank's own sharded state dict. On the default config,
the negative controls, whose checks must fail. Device and dtype follow the backend: NCCL -> the
rank's GPU in bf16, gloo -> CPU in fp32 (or in bf16: ``--sharding-ir-gloo-dtype``).
"""

from __future__ import annotations

import copy
import warnings

import torch
import torch.distributed as dist

from stagebot.harness.suites.sharding_ir import sabotage
from stagebot.harness.suites.sharding_ir.build import build_ir_model, poison_, prefill_inputs
from stagebot.harness.suites.sharding_ir.checks import (
    CheckResult,
    collective_count_check,
    follower_rows_check,
    hint_count,
    hints_lowered_check,
    local_shape_check,
    numeric_check,
)
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
from stagebot.harness.suites.sharding_ir.registry import DEFAULT, ModelSpec
from stagebot.harness.suites.sharding_ir.sharding import apply_sharding_hints, strip_sharding_hints

GLOO_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}  # options.GLOO_DTYPES' names
CONTROLS = (
    "control-no-collectives",  # must fail numeric
    "control-wrong-split-dim",  # must fail local-shapes
    "control-extra-collective",  # must fail collective-counts
    "control-strip-skipped",  # must fail hints-lowered
    "control-load-hooks-cleared",  # must fail load-full-checkpoint
    "control-hooks-reslice-sharded",  # must fail load-sharded-checkpoint
    "control-param-resplit-dim-1",  # must fail local-shapes (one parameter of the sharded graph)
)
# Controls that apply only where the model has what they break (must then be present).
MOE_CONTROLS = ("control-routing-mask-removed",)
FOLLOWER_ROWS = "follower-rows"  # a check where the graph has weights following another's rows
AVG_CONTROLS = (  # where a statistic is averaged over TP ranks (a norm spanning them)
    "control-avg-as-sum-counts",  # must fail collective-counts
    "control-avg-as-sum-numeric",  # must fail numeric
)
FOLLOWER_CONTROLS = (  # where a weight follows another's rows (that norm's weight, sinks)
    "control-follower-shifted-rows",  # must fail follower-rows
    "control-follower-shifted-numeric",  # must fail numeric
)


def run_equivalence(
    rank: int, spec: ModelSpec, dist_config: str, gloo_dtype: str = "fp32"
) -> dict[str, CheckResult]:
    """Check name (``<variant>/<check>``) -> this rank's result (on gloo in ``gloo_dtype``)."""
    dc = DistConfig.named(dist_config, rank)
    if dist.get_world_size() != dc.world_size:
        raise RuntimeError(
            f"{dist_config} needs {dc.world_size} ranks, got {dist.get_world_size()}"
        )
    if dist.get_backend() == "nccl":
        device, dtype = torch.device("cuda", torch.cuda.current_device()), torch.bfloat16
    else:
        device, dtype = torch.device("cpu"), GLOO_DTYPES[gloo_dtype]
    report = {}
    for name, overrides in spec.cases(dc):
        report |= _check_variant(spec, name, overrides, dc, device, dtype)
    return report


@torch.no_grad()
def _check_variant(
    spec: ModelSpec, name: str, overrides: dict, dc: DistConfig, device, dtype
) -> dict[str, CheckResult]:
    model = build_ir_model(spec, overrides, fixed_routing=True).to(device=device, dtype=dtype)
    ids, pos = (t.to(device) for t in prefill_inputs(model.arch.vocab_size))
    reference = model(ids, pos)
    snapshot = {k: v.clone() for k, v in model.state_dict().items()}
    gm = torch.export.export(model, (ids, pos)).module()
    hints_before = hint_count(gm)
    following = hint_count(gm, "shard_like")
    pristine = _copy(gm) if name == DEFAULT else None
    apply_sharding_hints(gm, dc)
    unstripped = _copy(gm) if name == DEFAULT else None
    strip_sharding_hints(gm)
    shapes, collectives = model.expected_local_shapes(dc), model.expected_collectives(dc)
    followers = model.expected_followers()
    dropped = sorted(k for k, shape in shapes.items() if shape is None)
    r = {
        "hints-lowered": hints_lowered_check(hints_before, gm),
        "local-shapes": local_shape_check(gm, shapes),
        "collective-counts": collective_count_check(gm, collectives),
    }
    if following or followers:
        r[FOLLOWER_ROWS] = _follower_check(gm, snapshot, followers, following)
    r["load-full-checkpoint"] = _load_full_check(gm, snapshot, dropped)
    sharded = gm(ids, pos)
    r["numeric"] = numeric_check(sharded, reference)
    own = {k: v.clone() for k, v in gm.state_dict().items()}
    r["load-sharded-checkpoint"] = _load_sharded_check(_copy(gm), own, (ids, pos), sharded)

    if name == DEFAULT:
        broken = _copy(gm)
        removed = sabotage.remove_collectives(broken)
        result = numeric_check(broken(ids, pos), reference)
        r[CONTROLS[0]] = CheckResult(result.ok, f"{removed} collectives removed; {result.detail}")
        r[CONTROLS[1]] = _wrong_dim_sharder_check(pristine, dc, shapes)
        broken = _copy(gm)
        param = sabotage.split_on_wrong_dim(broken, snapshot, dc.tp_size, dc.tp_rank)
        result = local_shape_check(broken, shapes)
        r[CONTROLS[6]] = CheckResult(result.ok, f"{param} re-split on dim 1; {result.detail}")
        broken = _copy(gm)
        sabotage.add_extra_collective(broken)
        r[CONTROLS[2]] = collective_count_check(broken, collectives)
        result = hints_lowered_check(hints_before, unstripped)
        r[CONTROLS[3]] = CheckResult(result.ok, f"strip skipped; {result.detail}")
        broken = _copy(gm)
        cleared = sabotage.clear_load_hooks(broken)
        result = _load_full_check(broken, snapshot, dropped)
        r[CONTROLS[4]] = CheckResult(result.ok, f"{cleared} load hooks cleared; {result.detail}")
        broken = _copy(gm)
        changed = sabotage.slice_every_checkpoint(broken)
        result = _load_sharded_check(broken, own, (ids, pos), sharded)
        r[CONTROLS[5]] = CheckResult(
            result.ok, f"{changed} hooks slice sharded tensors again; {result.detail}"
        )
        if any(op == "avg" for _, op in collectives):
            r |= _avg_controls(gm, collectives, (ids, pos), reference)
        if FOLLOWER_ROWS in r:
            r |= _follower_controls(gm, snapshot, followers, dc, (ids, pos), reference)
        broken = _copy(gm)
        unmasked = sabotage.remove_routing_mask(broken)
        if unmasked:
            result = numeric_check(broken(ids, pos), reference)
            r[MOE_CONTROLS[0]] = CheckResult(
                result.ok, f"{unmasked} routing masks removed; {result.detail}"
            )
    return {f"{name}/{check}": result for check, result in r.items()}


def _follower_check(gm, snapshot: dict, followers: dict, following: int) -> CheckResult:
    """The rows check, and as many followers declared as the graph has ``shard_like`` hints."""
    if len(followers) != following:
        return CheckResult(
            False, f"{len(followers)} followers declared, {following} shard_like hints exported"
        )
    return follower_rows_check(gm, snapshot, followers)


def _avg_controls(gm, collectives, args, reference) -> dict:
    """A summing all-reduce where a statistic needs an average: it must fail the collective
    count and the numeric check."""
    broken = _copy(gm)
    changed = sabotage.average_as_sum(broken)
    counts = collective_count_check(broken, collectives)
    numeric = numeric_check(broken(*args), reference)
    return {
        AVG_CONTROLS[0]: CheckResult(counts.ok, f"{changed} avg -> sum; {counts.detail}"),
        AVG_CONTROLS[1]: CheckResult(numeric.ok, f"{changed} avg -> sum; {numeric.detail}"),
    }


def _follower_controls(gm, snapshot, followers, dc, args, reference) -> dict:
    """Followers holding other rows than their leaders: the rows check and the numeric one must
    fail."""
    broken = _copy(gm)
    shifted = sabotage.shift_followers(broken, snapshot, followers, dc.tp_size, dc.tp_rank)
    rows = follower_rows_check(broken, snapshot, followers)
    numeric = numeric_check(broken(*args), reference)
    return {
        FOLLOWER_CONTROLS[0]: CheckResult(rows.ok, f"{shifted} shifted; {rows.detail}"),
        FOLLOWER_CONTROLS[1]: CheckResult(numeric.ok, f"{shifted} shifted; {numeric.detail}"),
    }


def _wrong_dim_sharder_check(pristine, dc: DistConfig, shapes: dict) -> CheckResult:
    """Shard with colwise weights split on dim 1: the local shapes must then be wrong, or the
    sharder must refuse (a fused weight's ``output_sizes`` do not add up along dim 1)."""
    try:
        with sabotage.sharder_splits_colwise_on_dim_1():
            broken = apply_sharding_hints(pristine, dc)
    except ShardingIRError as error:
        return CheckResult(False, f"sharder: colwise on dim 1 refused: {error}")
    result = local_shape_check(strip_sharding_hints(broken), shapes)
    return CheckResult(result.ok, f"sharder: colwise on dim 1; {result.detail}")


def _load_full_check(gm: torch.fx.GraphModule, snapshot: dict, dropped: list[str]) -> CheckResult:
    """Poison every weight, load the full unsharded snapshot: the hooks must slice each tensor to
    the rank's shard; nothing missing, only dropped experts unexpected, no NaN left."""
    poison_(gm)
    try:
        missing, unexpected = gm.load_state_dict(snapshot, strict=False)
    except RuntimeError as error:
        return CheckResult(False, f"load raised: {str(error).strip().splitlines()[-1][:200]}")
    nan_left = [n for n, p in gm.named_parameters() if p.isnan().any()]
    return CheckResult(
        not missing and sorted(unexpected) == dropped and not nan_left,
        f"missing {missing[:3]}; unexpected {len(unexpected)}, dropped experts {len(dropped)}; "
        f"{len(nan_left)} parameters left poisoned",
    )


def _load_sharded_check(gm: torch.fx.GraphModule, own: dict, args: tuple, expected) -> CheckResult:
    """Poison, reload the rank's own sharded state dict: the output must be bitwise the same."""
    poison_(gm)
    try:
        gm.load_state_dict(own, strict=True)
    except RuntimeError as error:
        return CheckResult(False, f"load raised: {str(error).strip().splitlines()[-1][:200]}")
    return CheckResult(torch.equal(gm(*args), expected), "bitwise vs first load")


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    with warnings.catch_warnings():  # torch's own pytree specs warn when deep-copied
        warnings.simplefilter("ignore", FutureWarning)
        return copy.deepcopy(gm)
