"""The grouped GEMMs against the oracle, row by row, over the case matrix.

Each op's input rows are the case's activations, quantised, sorted and permuted by the ops; the
oracle recomputes each sampled (token, k) from the token's own row and its expert's weights.
"""

from __future__ import annotations

import pytest
import torch

from stagebot.harness.suites.nvfp4_moe import oracle
from stagebot.harness.suites.nvfp4_moe.cases import Case, LayerWeights, Routed, matrix, one_case
from stagebot.harness.suites.nvfp4_moe.tolerances import (
    FINALIZE_MIN_CLOSE,
    FUSED_MOE_MAX_RMSE,
    SWIGLU_MIN_MATCH,
    Verdict,
    all_close,
    bytes_match,
    bytes_match_per_group,
    close_fraction,
    relative_rmse,
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


def _per_pair(pairs, x: torch.Tensor, width: int, fn) -> torch.Tensor:
    """float64 [len(pairs), width]: fn(expert, x[tokens]) evaluated one expert at a time."""
    out = torch.zeros(len(pairs), width, dtype=torch.float64, device=x.device)
    for expert in sorted({e for _, e, _ in pairs}):
        at = [i for i, (_, e, _) in enumerate(pairs) if e == expert]
        tokens = [pairs[i][0] for i in at]
        out[at] = fn(expert, x[tokens].double())
    return out


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
    y = ops.grouped_gemm(
        a, local["w2"], a_sf, local["w2_sf"], alpha, t.tile_idx_to_group_idx,
        t.num_non_exiting_tiles, tile_size=case.tile_size, backend=backend,
    )  # fmt: skip
    pairs = _local_pairs(case, routed)
    expected = _per_pair(pairs, routed.x, case.scale.hidden, weights.oracle.fc2)
    actual = y[[row for _, _, row in pairs]]
    return all_close(actual, expected, "rows")


@pytest.mark.moe_op("grouped_gemm")
@pytest.mark.parametrize("case", MATRIX)
def test_grouped_gemm_matches_the_oracle(case, weight_bank, moe_backend):
    verdict = _grouped_gemm_verdict(case, weight_bank.get(case.scale), moe_backend)
    assert verdict.ok, verdict.detail


@pytest.mark.moe_op("grouped_gemm")
def test_grouped_gemm_negative_control_fails(weight_bank, moe_backend, control_scale):
    """Every expert's alpha 3% off must fail the bf16 assert_close tolerance."""
    case = one_case(control_scale)
    assert not _grouped_gemm_verdict(case, weight_bank.get(case.scale), moe_backend, 0.03).ok


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
        a, w1, a_sf, w1_sf, 1.0 / (weights.fc1_gs * local["w1_gs"]), t.tile_idx_to_group_idx,
        t.num_non_exiting_tiles, weights.fc2_gs, tile_size=case.tile_size,
        tile_idx_to_mn_limit=t.tile_idx_to_mn_limit, backend=backend,
    )  # fmt: skip
    pairs = _local_pairs(case, routed)
    act = _per_pair(pairs, routed.x, inter, weights.oracle.swiglu)
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
    out = ops.grouped_gemm_finalize(
        a, local["w2"], a_sf, local["w2_sf"], 1.0 / (weights.fc2_gs * local["w2_gs"]),
        t.tile_idx_to_group_idx, t.num_non_exiting_tiles, t.tile_idx_to_mn_limit,
        t.permuted_idx_to_expanded_idx, routed.token_final_scales * (1.0 + scale_error),
        num_tokens=case.num_tokens, tile_size=case.tile_size, deterministic=deterministic,
        backend=backend,
    )  # fmt: skip
    return routed, out


def _finalize_verdict(
    case: Case, routed: Routed, out: torch.Tensor, weights: LayerWeights, deterministic: bool
):
    """Deterministic: rtol of the exact sum; atomic: of the terms' magnitudes (see tolerances)."""
    tokens = routed.oracle_tokens
    expected, magnitude = weights.oracle.combine_with_magnitude(
        routed.x[tokens].double(),
        routed.token_selected_experts[tokens].tolist(),
        routed.token_final_scales[tokens].tolist(),
        case.local,
        weights.oracle.fc2,
    )
    actual = out[routed.oracle_tokens]
    return close_fraction(
        actual,
        expected,
        FINALIZE_MIN_CLOSE,
        "finalized tokens",
        magnitude=None if deterministic else magnitude,
    )


@pytest.mark.moe_op("grouped_gemm_finalize")
@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "atomic"])
@pytest.mark.parametrize("case", MATRIX)
def test_grouped_gemm_finalize_matches_the_oracle(case, deterministic, weight_bank, moe_backend):
    weights = weight_bank.get(case.scale)
    routed, out = _finalize(case, weights, moe_backend, 0.0, deterministic)
    verdict = _finalize_verdict(case, routed, out, weights, deterministic)
    assert verdict.ok, verdict.detail
    if deterministic:
        _, again = _finalize(case, weights, moe_backend, 0.0, deterministic)
        assert torch.equal(out, again), "deterministic=True must give bit-identical results"


@pytest.mark.moe_op("grouped_gemm_finalize")
def test_grouped_gemm_finalize_negative_control_fails(weight_bank, moe_backend, control_scale):
    """Router weights 5% off must fail the > 99%-within-tolerance check, the atomic one (of the
    terms' magnitudes) included."""
    case = one_case(control_scale)
    weights = weight_bank.get(case.scale)
    for deterministic in (True, False):
        routed, out = _finalize(case, weights, moe_backend, 0.05, deterministic)
        verdict = _finalize_verdict(case, routed, out, weights, deterministic)
        assert not verdict.ok, verdict.detail


def test_an_empty_comparison_fails():
    """A check of zero elements would pass any output: it is a failing verdict."""
    empty = torch.zeros(0, 8)
    verdicts = [
        bytes_match(empty.to(torch.uint8), empty.to(torch.uint8), SWIGLU_MIN_MATCH, "bytes"),
        close_fraction(empty, empty, FINALIZE_MIN_CLOSE, "rows"),
        all_close(empty, empty, "rows"),
        relative_rmse(empty, empty, FUSED_MOE_MAX_RMSE, "out"),
        bytes_match_per_group(empty, empty, torch.zeros(0), SWIGLU_MIN_MATCH, "tiles"),
    ]
    assert not any(v.ok for v in verdicts)
    assert all("nothing compared" in v.detail for v in verdicts), [v.detail for v in verdicts]


@pytest.mark.parametrize("top_k", [2, 8])
def test_bf16_accumulation_needs_the_magnitude_tolerance(top_k):
    """What atomic finalize does (bf16 terms added into a bf16 sum) fails the rtol-of-the-sum
    check where terms cancel, passes rtol of the terms' magnitudes, and that check still fails
    router weights 5% off."""
    generator = torch.Generator().manual_seed(top_k)
    terms = torch.randn(20000, top_k, generator=generator, dtype=torch.float64)
    exact, magnitude = terms.sum(dim=1), terms.abs().sum(dim=1)
    accumulated = torch.zeros(terms.shape[0], dtype=torch.bfloat16)
    for k in range(top_k):
        accumulated = (accumulated.double() + terms[:, k].to(torch.bfloat16).double()).to(
            torch.bfloat16
        )
    strict = close_fraction(accumulated, exact, FINALIZE_MIN_CLOSE, "sum")
    assert not strict.ok, strict.detail
    loose = close_fraction(accumulated, exact, FINALIZE_MIN_CLOSE, "sum", magnitude=magnitude)
    assert loose.ok, loose.detail
    off = close_fraction(exact * 1.05, exact, FINALIZE_MIN_CLOSE, "sum", magnitude=magnitude)
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
    routed, out = _finalize(case, weights, moe_backend, 0.0, deterministic, no_local=True)
    assert out.shape == (case.num_tokens, case.scale.hidden)
    assert int((out != 0).sum()) == 0, "a token with no local expert must finalize to zero"
