"""fused_moe, with the finalize fusion on and off, against the oracle's per-token MoE layer.

The tolerance is the relative RMSE of the second GEMM's error bound (see tolerances: its
reduction, its epilogue's roundings) plus ACTIVATION_CODE_RMSE for activation codes that the
backend's fp32 SwiGLU rounds the other way than the float64 oracle.
"""

from __future__ import annotations

import pytest
import torch

from stagebot.harness.suites.nvfp4_moe.cases import (
    Case,
    LayerWeights,
    Routed,
    matrix,
    one_case,
    run_op,
)
from stagebot.harness.suites.nvfp4_moe.tolerances import (
    ACTIVATION_CODE_RMSE,
    Verdict,
    accumulation_of,
    error_bound,
    rmse_within_bound,
    summed_rounding,
)
from stagebot.kernels import ops


def _flip_signs(w: torch.Tensor, fraction: float, g: torch.Generator) -> torch.Tensor:
    """Flips the sign of the low-nibble value in ``fraction`` of the bytes."""
    hit = torch.rand(w.shape, generator=g, device=w.device) < fraction
    return torch.where(hit, w ^ 0x08, w)


def _fused_moe(
    case: Case,
    weights: LayerWeights,
    backend: str,
    unfused: bool,
    perturb: bool = False,
    no_local: bool = False,
    alpha_error: float = 0.0,
) -> tuple[Routed, torch.Tensor, str]:
    routed = Routed.build(case, case.scale.hidden, no_local=no_local)
    local = weights.local(case)
    if perturb:
        local["w2"] = _flip_signs(local["w2"], 0.1, case.generator("perturb"))
    local["w2_gs"] = local["w2_gs"] / (1.0 + alpha_error)  # alpha = 1 / (fc2_gs * w2_gs)
    out, ran = run_op(
        "fused_moe", ops.fused_moe,
        routed.x, routed.token_selected_experts, routed.token_final_scales, **local,
        fc1_input_gs=weights.fc1_gs, fc2_input_gs=weights.fc2_gs,
        num_experts=case.scale.num_experts, local_expert_offset=case.local_offset,
        tile_size=case.tile_size, disable_finalize_fusion=unfused, backend=backend,
    )  # fmt: skip
    return routed, out, ran


def _fused_moe_verdict(
    case: Case,
    weights: LayerWeights,
    backend: str,
    unfused: bool,
    perturb: bool = False,
    alpha_error: float = 0.0,
) -> Verdict:
    routed, out, ran = _fused_moe(case, weights, backend, unfused, perturb, alpha_error=alpha_error)
    tokens = routed.oracle_tokens
    experts = routed.token_selected_experts[tokens].tolist()
    scales = routed.token_final_scales[tokens].tolist()
    layer = weights.oracle.layer(routed.x[tokens].double(), experts, scales, case.local)
    # Unfused: grouped_gemm's bf16 rows, summed in fp32 by moe_unpermute.
    rounding = summed_rounding(ran, case.top_k, atomic=not unfused, bf16_rows=unfused)
    bound = error_bound(
        layer.value, layer.magnitude, layer.products, case.scale.intermediate,
        accumulation_of(ran), rounding,
    )  # fmt: skip
    return rmse_within_bound(out[tokens], layer.value, bound, ACTIVATION_CODE_RMSE, f"out ({ran})")


@pytest.mark.moe_op("fused_moe")
@pytest.mark.parametrize("finalize", ["fused-finalize", "unfused-finalize"])
@pytest.mark.parametrize("case", matrix())
def test_fused_moe_matches_the_oracle(case, finalize, weight_bank, moe_backend):
    weights = weight_bank.get(case.scale)
    verdict = _fused_moe_verdict(case, weights, moe_backend, unfused=finalize.startswith("un"))
    assert verdict.ok, verdict.detail


@pytest.mark.moe_op("fused_moe")
def test_fused_moe_negative_control_fails(weight_bank, moe_backend, control_scale):
    """Signs flipped in 10% of w2's bytes must fail the relative RMSE tolerance."""
    case = one_case(control_scale)
    verdict = _fused_moe_verdict(case, weight_bank.get(case.scale), moe_backend, False, True)
    assert not verdict.ok, verdict.detail


@pytest.mark.moe_op("fused_moe")
@pytest.mark.parametrize("finalize", ["fused-finalize", "unfused-finalize"])
def test_fused_moe_down_projection_alpha_one_percent_off_fails(
    finalize, weight_bank, moe_backend, control_scale
):
    """The down projection's alpha 1% off must fail; at top_k 1 every path's bound is one bf16
    rounding (two unfused) plus the activation-code allowance, under 1%."""
    case = one_case(control_scale, top_k=1)
    weights = weight_bank.get(case.scale)
    unfused = finalize.startswith("un")
    verdict = _fused_moe_verdict(case, weights, moe_backend, unfused, alpha_error=0.01)
    assert not verdict.ok, verdict.detail


@pytest.mark.moe_op("fused_moe")
@pytest.mark.parametrize("finalize", ["fused-finalize", "unfused-finalize"])
def test_fused_moe_without_local_pairs_is_zero(finalize, weight_bank, moe_backend, control_scale):
    """Every token routed to other ranks' experts: this rank's output is exactly zero."""
    case = one_case(control_scale, num_tokens=128, top_k=8, ep=8)
    weights = weight_bank.get(case.scale)
    unfused = finalize.startswith("un")
    routed, out, _ = _fused_moe(case, weights, moe_backend, unfused, no_local=True)
    assert routed.oracle_tokens == [] and int(routed.tables.num_non_exiting_tiles) == 0
    assert out.shape == routed.x.shape and int((out != 0).sum()) == 0
