"""Structural and numeric checks of a sharded graph. Each returns a CheckResult, never raises, so a
negative control can assert that a check *fails* on a sabotaged graph.

None may pass vacuously: the expectations come from the IR model's closed-form plan (not from the
sharder, nor from ``DistConfig.local_experts`` that it uses: MoE expert ranges are written out in
``models.moe.expected_local_experts``), the collective count compares whole per-module dicts (an
empty or missing count fails), and shapes are compared for every parameter by name, both ways.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import Tensor, fx

from stagebot.harness.suites.sharding_ir.collectives import collective_op
from stagebot.harness.suites.sharding_ir.hints import hint_ops

# Relative RMSE ||y_s - y_u|| / ||y_u|| allowed per dtype: fp32 tight; bf16 clean runs sit near
# 0.01, sabotaged ones above 0.05.
REL_RMSE_TOLERANCE: dict[torch.dtype, float] = {
    torch.float32: 1e-5,
    torch.bfloat16: 0.02,
    torch.float16: 0.01,
}
_BLOCK = re.compile(r"^model\.layers\.\d+\.[A-Za-z_]+")


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    detail: str


def rel_rmse(actual: Tensor, reference: Tensor) -> float:
    diff = (actual.float() - reference.float()).norm()
    return (diff / reference.float().norm()).item()


def numeric_check(actual: Tensor, reference: Tensor) -> CheckResult:
    """Sharded output vs the unsharded reference, by relative RMSE for the reference's dtype."""
    if actual.shape != reference.shape:
        return CheckResult(
            False, f"shape {tuple(actual.shape)} != reference {tuple(reference.shape)}"
        )
    tolerance = REL_RMSE_TOLERANCE[reference.dtype]
    err = rel_rmse(actual, reference)
    return CheckResult(
        err <= tolerance, f"rel RMSE {err:.3g} (tolerance {tolerance:g}, {reference.dtype})"
    )


def collective_counts(gm: fx.GraphModule) -> dict[str, int]:
    """Collectives per block (``model.layers.<i>.<block>``), from export's module stack."""
    counts: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is collective_op():
            stack = node.meta.get("nn_module_stack") or {}
            path = next(reversed(stack.values()))[0] if stack else "<no module>"
            block = _BLOCK.match(path)
            key = block.group(0) if block else path
            counts[key] = counts.get(key, 0) + 1
    return counts


def collective_count_check(gm: fx.GraphModule, expected: dict[str, int]) -> CheckResult:
    if not expected:
        return CheckResult(False, "no collectives expected: nothing would be checked")
    actual = collective_counts(gm)
    wrong = {k: (actual.get(k, 0), expected.get(k, 0)) for k in actual.keys() | expected.keys()}
    wrong = {k: v for k, v in sorted(wrong.items()) if v[0] != v[1]}
    detail = f"{sum(actual.values())} collectives in {len(actual)} blocks"
    if wrong:
        detail += "; (found, expected): " + ", ".join(f"{k}: {v}" for k, v in wrong.items())
    return CheckResult(not wrong, detail)


def local_shape_check(
    gm: fx.GraphModule, expected: dict[str, tuple[int, ...] | None]
) -> CheckResult:
    """Every parameter's local shape vs the plan; a parameter the plan drops (None) must be gone."""
    actual = {name: tuple(p.shape) for name, p in gm.named_parameters()}
    kept = {name: shape for name, shape in expected.items() if shape is not None}
    problems = [
        f"{n}: {actual.get(n, 'missing')} != {kept.get(n, 'absent')}"
        for n in sorted(actual.keys() | kept.keys())
        if actual.get(n) != kept.get(n)
    ]
    detail = f"{len(actual)} parameters checked"
    if problems:
        detail += f"; {len(problems)} wrong: " + "; ".join(problems[:5])
    return CheckResult(not problems and bool(actual), detail)


def hint_count(gm: fx.GraphModule) -> int:
    ops = set(hint_ops().values())
    return sum(node.op == "call_function" and node.target in ops for node in gm.graph.nodes)


def hints_lowered_check(hints_exported: int, gm: fx.GraphModule) -> CheckResult:
    """The export kept hint nodes (else nothing was sharded) and none is left once stripped."""
    left = hint_count(gm)
    return CheckResult(
        hints_exported > 0 and left == 0,
        f"{hints_exported} hint nodes exported, {left} left after strip",
    )
