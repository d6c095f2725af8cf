"""The grouped GEMMs against the oracle, row by row, over the case matrix.

Each op's input rows are the case's activations, quantised, sorted and permuted by the ops; the
oracle recomputes each sampled (token, k) from the token's own row and its expert's weights.
"""

from __future__ import annotations

import pytest
import torch

from stagebot.harness.suites.nvfp4_moe import oracle
from stagebot.harness.suites.nvfp4_moe.cases import (
    Case,
    LayerWeights,
    Routed,
    matrix,
    one_case,
    run_op,
)
from stagebot.harness.suites.nvfp4_moe.tolerances import (
    SWIGLU_MIN_MATCH,
    U_BF16,
    Rounding,
    Verdict,
    accumulation_of,
    all_close,
    bytes_match,
    bytes_match_per_group,
    error_bound,
    rmse_within_bound,
    summed_rounding,
    within_bound,
)
from stagebot.kernels import ops

MATRIX = matrix()


def _permuted(case: Case, width: int, gs: torch.Tensor, no_local: bool = False):
    """(routed, a, a_sf): the case's activations of ``width`` columns, quantised and permuted."""
    routed = Routed.build(case, width, no_local=no_local)
    x, x_sf = ops.nvfp4_quantize(routed.x, gs)
    t = routed.tables
    a, a_sf = ops.moe_permute(
        x, x_sf, t.tile_idx_to_mn_limit, t.permuted_idx_to_expanded_idx,
        t.num_non_exiting_tiles, case.tile_size, case.top_k,
    )  # fmt: skip
    return routed, a, a_sf


def _local_pairs(case: Case, routed: Routed) -> list[tuple[int, int, int]]:
    """(token, expert, permuted row) for each sampled token's local (token, k)."""
    experts = routed.token_selected_experts.cpu().tolist()
    rows = routed.tables.expanded_idx_to_permuted_idx.cpu().tolist()
    return [
        (token, experts[token][k], rows[token][k])
        for token in routed.oracle_tokens
        for k in range(case.top_k)
        if experts[token][k] in case.local
    ]


def _pair_rows(routed: Routed, pairs) -> tuple[torch.Tensor, list[int]]:
    """(float64 [len(pairs), width]: each pair's token row, the pairs' experts)."""
    return routed.x[[token for token, _, _ in pairs]].double(), [e for _, e, _ in pairs]


def _grouped_gemm_verdict(
    case: Case,
    weights: LayerWeights,
    backend: str,
    alpha_error: float = 0.0,
    no_local: bool = False,
) -> Verdict:
    routed, a, a_sf = _permuted(case, case.scale.intermediate, weights.fc2_gs, no_local)
    local = weights.local(case)
    alpha = (1.0 + alpha_error) / (weights.fc2_gs * local["w2_gs"])
    t = routed.tables
    y, ran = run_op(
        "grouped_gemm", ops.grouped_gemm, a, local["w2"], a_sf, local["w2_sf"], alpha,
        t.tile_idx_to_group_idx, t.num_non_exiting_tiles, tile_size=case.tile_size,
        backend=backend,
    )  # fmt: skip
    pairs = _local_pairs(case, routed)
    expected, products = weights.oracle.fc2(*_pair_rows(routed, pairs))
    actual = y[[row for _, _, row in pairs]]
    bound = error_bound(
        expected, expected.abs(), products, case.scale.intermediate, accumulation_of(ran),
        Rounding.rows(),
    )  # fmt: skip
    return within_bound(actual, expected, bound, f"rows ({ran})")


@pytest.mark.moe_op("grouped_gemm")
@pytest.mark.parametrize("case", MATRIX)
def test_grouped_gemm_matches_the_oracle(case, weight_bank, moe_backend):
    verdict = _grouped_gemm_verdict(case, weight_bank.get(case.scale), moe_backend)
    assert verdict.ok, verdict.detail


@pytest.mark.moe_op("grouped_gemm")
def test_grouped_gemm_negative_control_fails(weight_bank, moe_backend, control_scale):
    """Every expert's alpha 1% off must fail the backend's error bound."""
    case = one_case(control_scale)
    verdict = _grouped_gemm_verdict(case, weight_bank.get(case.scale), moe_backend, 0.01)
    assert not verdict.ok, verdict.detail


def _plain_interleaved(w1: torch.Tensor, w1_sf: torch.Tensor, hidden: int):
    """w1 and its scales with the SwiGLU interleave undone: a loader that forgot it."""
    rows = w1.shape[1]
    sf = ops.unswizzle_sf(w1_sf, rows, hidden // 16)
    plain_sf = ops.swizzle_sf(ops.deinterleave_linear_and_gate(sf, dim=1))
    return ops.deinterleave_linear_and_gate(w1, dim=1), plain_sf


def _swiglu_verdicts(
    case: Case,
    weights: LayerWeights,
    backend: str,
    forget_interleave: bool = False,
    no_local: bool = False,
    alpha_error: float = 0.0,
) -> list[Verdict]:
    hidden, inter = case.scale.hidden, case.scale.intermediate
    routed, a, a_sf = _permuted(case, hidden, weights.fc1_gs, no_local)
    local = weights.local(case)
    w1, w1_sf = local["w1"], local["w1_sf"]
    if forget_interleave:
        w1, w1_sf = _plain_interleaved(w1, w1_sf, hidden)
    t = routed.tables
    # With the tile limits, as fused_moe calls it (rows past them are not compared).
    c, c_sf = ops.grouped_gemm_swiglu(
        a, w1, a_sf, w1_sf, (1.0 + alpha_error) / (weights.fc1_gs * local["w1_gs"]),
        t.tile_idx_to_group_idx,
        t.num_non_exiting_tiles, weights.fc2_gs, tile_size=case.tile_size,
        tile_idx_to_mn_limit=t.tile_idx_to_mn_limit, backend=backend,
    )  # fmt: skip
    pairs = _local_pairs(case, routed)
    act = weights.oracle.swiglu(*_pair_rows(routed, pairs))
    codes, sf = oracle.quantize(act, weights.fc2_gs.item())
    rows = [row for _, _, row in pairs]
    c_scales = oracle.read_scales(c_sf, c.shape[0], inter // 16)
    tiles = torch.tensor(rows, device=c.device) // case.tile_size
    return [
        bytes_match(c[rows], oracle.pack(codes), SWIGLU_MIN_MATCH, "c bytes"),
        bytes_match_per_group(c[rows], oracle.pack(codes), tiles, SWIGLU_MIN_MATCH, "c per tile"),
        bytes_match(c_scales[rows], sf, SWIGLU_MIN_MATCH, "c_sf bytes"),
    ]


@pytest.mark.moe_op("grouped_gemm_swiglu")
@pytest.mark.parametrize("case", MATRIX)
def test_grouped_gemm_swiglu_matches_the_oracle(case, weight_bank, moe_backend):
    for verdict in _swiglu_verdicts(case, weight_bank.get(case.scale), moe_backend):
        assert verdict.ok, verdict.detail


@pytest.mark.moe_op("grouped_gemm_swiglu")
def test_grouped_gemm_swiglu_negative_control_fails(weight_bank, moe_backend, control_scale):
    """Weights without the linear/gate interleave must fail the 95% byte tolerance."""
    case = one_case(control_scale)
    verdicts = _swiglu_verdicts(case, weight_bank.get(case.scale), moe_backend, True)
    assert not any(v.ok for v in verdicts), [v.detail for v in verdicts]


@pytest.mark.moe_op("grouped_gemm_swiglu")
def test_grouped_gemm_swiglu_alpha_one_percent_off_fails(weight_bank, moe_backend, control_scale):
    """Alpha 1% off must fail the 99% byte tolerance (a block's scale byte moves with its
    largest value, so about one in six changes)."""
    case = one_case(control_scale)
    weights = weight_bank.get(case.scale)
    verdicts = _swiglu_verdicts(case, weights, moe_backend, alpha_error=0.01)
    assert not all(v.ok for v in verdicts), [v.detail for v in verdicts]


def _finalize(
    case: Case,
    weights: LayerWeights,
    backend: str,
    scale_error: float,
    deterministic: bool,
    no_local: bool = False,
):
    routed, a, a_sf = _permuted(case, case.scale.intermediate, weights.fc2_gs, no_local)
    local = weights.local(case)
    t = routed.tables
    out, ran = run_op(
        "grouped_gemm_finalize", ops.grouped_gemm_finalize,
        a, local["w2"], a_sf, local["w2_sf"], 1.0 / (weights.fc2_gs * local["w2_gs"]),
        t.tile_idx_to_group_idx, t.num_non_exiting_tiles, t.tile_idx_to_mn_limit,
        t.permuted_idx_to_expanded_idx, routed.token_final_scales * (1.0 + scale_error),
        num_tokens=case.num_tokens, tile_size=case.tile_size, deterministic=deterministic,
        backend=backend,
    )  # fmt: skip
    return routed, out, ran


def _finalize_verdict(
    case: Case, routed: Routed, out: torch.Tensor, weights: LayerWeights, ran: str, atomic: bool
):
    tokens = routed.oracle_tokens
    combined = weights.oracle.combine(
        routed.x[tokens].double(),
        routed.token_selected_experts[tokens].tolist(),
        routed.token_final_scales[tokens].tolist(),
        case.local,
        weights.oracle.fc2,
    )
    bound = error_bound(
        combined.value, combined.magnitude, combined.products, case.scale.intermediate,
        accumulation_of(ran), summed_rounding(ran, case.top_k, atomic),
    )  # fmt: skip
    return within_bound(out[tokens], combined.value, bound, f"finalized tokens ({ran})")


@pytest.mark.moe_op("grouped_gemm_finalize")
@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "atomic"])
@pytest.mark.parametrize("case", MATRIX)
def test_grouped_gemm_finalize_matches_the_oracle(case, deterministic, weight_bank, moe_backend):
    weights = weight_bank.get(case.scale)
    routed, out, ran = _finalize(case, weights, moe_backend, 0.0, deterministic)
    verdict = _finalize_verdict(case, routed, out, weights, ran, not deterministic)
    assert verdict.ok, verdict.detail
    if deterministic:
        _, again, _ = _finalize(case, weights, moe_backend, 0.0, deterministic)
        assert torch.equal(out, again), "deterministic=True must give bit-identical results"


@pytest.mark.moe_op("grouped_gemm_finalize")
def test_grouped_gemm_finalize_negative_control_fails(weight_bank, moe_backend, control_scale):
    """Router weights 1% off must fail the backend's error bound, the atomic one included: at
    top_k 2 that bound (two bf16 roundings of the terms' magnitudes) is under 1% of a token's
    sum where its two terms share a sign."""
    case = one_case(control_scale, top_k=2)
    weights = weight_bank.get(case.scale)
    for deterministic in (True, False):
        routed, out, ran = _finalize(case, weights, moe_backend, 0.01, deterministic)
        verdict = _finalize_verdict(case, routed, out, weights, ran, not deterministic)
        assert not verdict.ok, verdict.detail


def test_an_empty_comparison_fails():
    """A check of zero elements would pass any output: it is a failing verdict."""
    empty = torch.zeros(0, 8)
    verdicts = [
        bytes_match(empty.to(torch.uint8), empty.to(torch.uint8), SWIGLU_MIN_MATCH, "bytes"),
        all_close(empty, empty, "rows"),
        within_bound(empty, empty, empty, "rows"),
        rmse_within_bound(empty, empty, empty, U_BF16, "out"),
        bytes_match_per_group(empty, empty, torch.zeros(0), SWIGLU_MIN_MATCH, "tiles"),
    ]
    assert not any(v.ok for v in verdicts)
    assert all("nothing compared" in v.detail for v in verdicts), [v.detail for v in verdicts]


@pytest.mark.parametrize("top_k", [2, 8])
def test_bf16_atomics_need_their_own_bound(top_k):
    """What atomic finalize does (bf16 terms added into a bf16 sum, in any order) exceeds the
    bound of one rounding where terms cancel, stays within Rounding.bf16_atomics, and that bound
    still fails sums 1% off at top_k 2 (5% at top_k 8)."""
    generator = torch.Generator().manual_seed(top_k)
    terms = torch.randn(20000, top_k, generator=generator, dtype=torch.float64)
    exact, magnitude = terms.sum(dim=1), terms.abs().sum(dim=1)
    accumulated = torch.zeros(terms.shape[0], dtype=torch.bfloat16)
    for k in torch.randperm(top_k, generator=generator).tolist():
        accumulated = (accumulated.double() + terms[:, k].to(torch.bfloat16).double()).to(
            torch.bfloat16
        )

    def verdict(actual: torch.Tensor, rounding: Rounding) -> Verdict:
        no_products = torch.zeros_like(exact)
        bound = error_bound(exact, magnitude, no_products, 1, accumulation_of("cute"), rounding)
        return within_bound(actual, exact, bound, "sum")

    strict = verdict(accumulated, Rounding.fp32_sum(top_k))
    assert not strict.ok, strict.detail
    atomic = verdict(accumulated, Rounding.bf16_atomics(top_k))
    assert atomic.ok, atomic.detail
    off = verdict(exact * (1.01 if top_k == 2 else 1.05), Rounding.bf16_atomics(top_k))
    assert not off.ok, off.detail


def _no_local_case(scale):
    """A case whose tokens are all routed to other ranks' experts."""
    return one_case(scale, num_tokens=128, top_k=8, ep=8)


@pytest.mark.moe_op("grouped_gemm")
def test_grouped_gemm_without_local_pairs(weight_bank, moe_backend, control_scale):
    """No tile is non-exiting: the op runs and returns its shape; the oracle has nothing to check
    (tiles at or past num_non_exiting_tiles are not written, so the output holds no claim)."""
    case = _no_local_case(control_scale)
    weights = weight_bank.get(case.scale)
    routed, a, a_sf = _permuted(case, case.scale.intermediate, weights.fc2_gs, no_local=True)
    assert routed.oracle_tokens == [] and int(routed.tables.num_non_exiting_tiles) == 0
    local, t = weights.local(case), routed.tables
    y = ops.grouped_gemm(
        a, local["w2"], a_sf, local["w2_sf"], 1.0 / (weights.fc2_gs * local["w2_gs"]),
        t.tile_idx_to_group_idx, t.num_non_exiting_tiles, tile_size=case.tile_size,
        backend=moe_backend,
    )  # fmt: skip
    assert y.shape == (a.shape[0], case.scale.hidden) and y.dtype == torch.bfloat16
    verdict = _grouped_gemm_verdict(case, weights, moe_backend, no_local=True)
    assert not verdict.ok and "nothing compared" in verdict.detail


@pytest.mark.moe_op("grouped_gemm_swiglu")
def test_grouped_gemm_swiglu_without_local_pairs(weight_bank, moe_backend, control_scale):
    case = _no_local_case(control_scale)
    weights = weight_bank.get(case.scale)
    verdicts = _swiglu_verdicts(case, weights, moe_backend, no_local=True)
    assert not any(v.ok for v in verdicts) and "nothing compared" in verdicts[0].detail


@pytest.mark.moe_op("grouped_gemm_finalize")
@pytest.mark.parametrize("deterministic", [True, False])
def test_grouped_gemm_finalize_without_local_pairs_is_zero(
    weight_bank, moe_backend, deterministic, control_scale
):
    """No local (token, k): every token's finalized row is exactly zero."""
    case = _no_local_case(control_scale)
    weights = weight_bank.get(case.scale)
    routed, out, _ = _finalize(case, weights, moe_backend, 0.0, deterministic, no_local=True)
    assert out.shape == (case.num_tokens, case.scale.hidden)
    assert int((out != 0).sum()) == 0, "a token with no local expert must finalize to zero"
