"""Structural and numeric checks of a sharded graph. Each returns a CheckResult, never raises, so a
negative control can assert that a check *fails* on a sabotaged graph.

None may pass vacuously: the expectations come from the IR model's closed-form plan (not from the
sharder, nor from ``DistConfig.local_experts`` that it uses: MoE expert ranges are written out in
``blocks.moe.expected_local_experts``), the collective count compares whole dicts by module and
reduce op (an empty or missing count fails, a sum where an average belongs too), shapes are
compared for every parameter by name, both ways, and a weight that follows another's row split is
checked against the rows its leader actually holds, found by value in the full tensor.
"""

from __future__ import annotations

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


def collective_counts(gm: fx.GraphModule) -> dict[tuple[str, str], int]:
    """(module path, reduce op) -> collectives, the module being the innermost one whose forward
    issued the node (export's module stack)."""
    counts: dict[tuple[str, str], int] = {}
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is collective_op():
            stack = node.meta.get("nn_module_stack") or {}
            path = next(reversed(stack.values()))[0] if stack else "<no module>"
            key = (path, node.args[1])
            counts[key] = counts.get(key, 0) + 1
    return counts


def collective_count_check(gm: fx.GraphModule, expected: dict[tuple[str, str], int]) -> CheckResult:
    if not expected:
        return CheckResult(False, "no collectives expected: nothing would be checked")
    actual = collective_counts(gm)
    wrong = {k: (actual.get(k, 0), expected.get(k, 0)) for k in actual.keys() | expected.keys()}
    wrong = {k: v for k, v in sorted(wrong.items()) if v[0] != v[1]}
    ops = sorted({op for _, op in actual})
    detail = f"{sum(actual.values())} collectives ({', '.join(ops)}) in {len(actual)} modules"
    if wrong:
        detail += "; (found, expected): " + ", ".join(
            f"{path} [{op}]: {v}" for (path, op), v in wrong.items()
        )
    return CheckResult(not wrong, detail)


def _rows_in(local: Tensor, full: Tensor) -> list[int] | None:
    """The index in ``full`` of each row of ``local`` (found by value), None if one is not there."""
    found = []
    for row in local:
        hits = (full == row).all(dim=-1).nonzero()
        if len(hits) == 0:
            return None
        found.append(int(hits[0]))
    return found


def follower_rows_check(
    gm: fx.GraphModule, full: dict[str, Tensor], followers: dict[str, str]
) -> CheckResult:
    """Each follower holds the entries of the rows its leader holds on this rank: the leader's
    rows are found by value in its full tensor, the follower compared with the same entries of
    its own, an entry per ``rows / entries`` rows of the full tensors (1 for a norm weight,
    ``head_dim`` for a per-head one)."""
    if not followers:
        return CheckResult(False, "no followers declared: nothing would be checked")
    problems = []
    for follower, leader in sorted(followers.items()):
        local_leader = gm.get_parameter(leader).detach()
        rows = _rows_in(local_leader, full[leader])
        if rows is None:
            problems.append(f"{leader}: a local row is no row of the full tensor")
            continue
        per = len(full[leader]) // len(full[follower])
        entries = list(dict.fromkeys(row // per for row in rows))
        expected, local = full[follower][entries], gm.get_parameter(follower).detach()
        if local.shape != expected.shape or not torch.equal(local, expected):
            problems.append(
                f"{follower} does not hold the entries of {leader}'s rows {rows[:4]} "
                f"(entries {entries[:4]}, {per} rows each)"
            )
    detail = f"{len(followers)} followers checked"
    if problems:
        detail += f"; {len(problems)} wrong: " + "; ".join(problems[:3])
    return CheckResult(not problems, detail)


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


def hint_count(gm: fx.GraphModule, name: str | None = None) -> int:
    """Hint nodes in ``gm`` (only ``name``'s, if given)."""
    ops = {op for hint, op in hint_ops().items() if name in (None, hint)}
    return sum(node.op == "call_function" and node.target in ops for node in gm.graph.nodes)


def hints_lowered_check(hints_exported: int, gm: fx.GraphModule) -> CheckResult:
    """The export kept hint nodes (else nothing was sharded) and none is left once stripped."""
    left = hint_count(gm)
    return CheckResult(
        hints_exported > 0 and left == 0,
        f"{hints_exported} hint nodes exported, {left} left after strip",
    )
