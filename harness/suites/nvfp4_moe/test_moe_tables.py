"""moe_sort invariants, moe_permute row copies and moe_unpermute against a float64 loop."""

from __future__ import annotations

import pytest
import torch

from stagebot.harness.suites.nvfp4_moe import oracle
from stagebot.harness.suites.nvfp4_moe.cases import Case, Routed, matrix, one_case
from stagebot.harness.suites.nvfp4_moe.tolerances import Verdict, all_close
from stagebot.kernels import ops

MATRIX = matrix()


def _valid_rows(tables, tile: int) -> torch.Tensor:
    mn_limit = tables.tile_idx_to_mn_limit.long().cpu()
    rows = torch.arange(mn_limit.numel() * tile)
    return (rows // tile < int(tables.num_non_exiting_tiles)) & (rows < mn_limit[rows // tile])


@pytest.mark.parametrize("case", MATRIX)
def test_moe_sort_invariants(case: Case):
    routed = Routed.build(case, width=64)
    tables, routed_experts = routed.tables, routed.token_selected_experts.long().cpu()
    tile, top_k = case.tile_size, case.top_k
    local = routed_experts - case.local_offset
    is_local = (local >= 0) & (local < case.num_local)
    e2p = tables.expanded_idx_to_permuted_idx.long().cpu()
    p2e = tables.permuted_idx_to_expanded_idx.long().cpu()
    group = tables.tile_idx_to_group_idx.long().cpu()
    mn_limit = tables.tile_idx_to_mn_limit.long().cpu()
    tiles = int(tables.num_non_exiting_tiles)

    expanded = case.num_tokens * top_k
    max_tiles = (
        expanded if expanded <= case.num_local else (expanded + (tile - 1) * case.num_local) // tile
    )
    assert group.shape == mn_limit.shape == (max_tiles,)
    assert p2e.shape == (max_tiles * tile,)
    assert int(tables.total_num_padded_tokens) == tiles * tile

    assert torch.equal(e2p < 0, ~is_local), "-1 exactly for the non-local (token, k)"
    assert (e2p[~is_local] == -1).all()
    rows = e2p[is_local]
    assert rows.unique().numel() == rows.numel(), "each local (token, k) exactly once"
    assert (rows // tile < tiles).all()
    assert torch.equal(group[rows // tile], local[is_local]), "inside its own expert's tiles"
    assert (rows < mn_limit[rows // tile]).all()
    assert torch.equal(p2e[rows], torch.arange(expanded).view(-1, top_k)[is_local])
    # Experts ascend and, inside one, pairs keep token order: so rows taken in (expert, expanded
    # index) order strictly ascend (an unstable sort breaks ties by chance).
    in_order = rows[torch.argsort(local[is_local], stable=True)]
    assert (in_order[1:] > in_order[:-1]).all(), "inside an expert, pairs keep token order"

    g, limit, index = group[:tiles], mn_limit[:tiles], torch.arange(tiles)
    assert (g[1:] >= g[:-1]).all(), "local experts in ascending order"
    assert ((limit > index * tile) & (limit <= (index + 1) * tile)).all(), "mn_limit in its tile"
    last = torch.ones(tiles, dtype=torch.bool)
    last[:-1] = g[1:] != g[:-1]
    assert (limit[~last] == (index[~last] + 1) * tile).all(), (
        "padding only in an expert's last tile"
    )
    counts = torch.bincount(local[is_local], minlength=case.num_local)
    valid_per_expert = torch.zeros(case.num_local, dtype=torch.long)
    valid_per_expert.index_add_(0, g, limit - index * tile)
    assert torch.equal(valid_per_expert, counts)
    assert tiles == int(((counts + tile - 1) // tile).sum())
    assert (p2e[: tiles * tile][~_valid_rows(tables, tile)[: tiles * tile]] == -1).all()


@pytest.mark.parametrize("case", MATRIX)
def test_moe_permute_copies_token_rows(case: Case):
    routed = Routed.build(case, width=case.scale.hidden)
    t = routed.tables
    x, x_sf = ops.nvfp4_quantize(routed.x, 100.0)
    a, a_sf = ops.moe_permute(
        x, x_sf, t.tile_idx_to_mn_limit, t.permuted_idx_to_expanded_idx,
        t.num_non_exiting_tiles, case.tile_size, case.top_k,
    )  # fmt: skip
    # Compared where the op ran: copying a T8192 case's rows to the host costs more than the op.
    valid = _valid_rows(t, case.tile_size).to(a.device)
    source = t.permuted_idx_to_expanded_idx.long()[valid] // case.top_k
    assert torch.equal(a[valid], x[source])
    assert (a[~valid] == 0).all()
    cols = case.scale.hidden // 16
    token_scales = oracle.read_scales(x_sf, case.num_tokens, cols)
    row_scales = oracle.read_scales(a_sf, a.shape[0], cols)
    assert torch.equal(row_scales[valid], token_scales[source])


def _unpermute_verdict(case: Case, perturb: bool) -> Verdict:
    routed = Routed.build(case, width=64)
    e2p, scales = routed.tables.expanded_idx_to_permuted_idx, routed.token_final_scales
    g = case.generator("permuted")
    rows = routed.tables.permuted_idx_to_expanded_idx.numel()
    permuted = torch.randn(rows, 64, generator=g, device=case.scale.device)
    permuted = permuted.to(torch.bfloat16)
    op_scales = scales * 1.05 if perturb else scales
    out = ops.moe_unpermute(permuted, e2p, op_scales).cpu()
    e2p, scales, permuted = e2p.cpu().tolist(), scales.cpu().double(), permuted.cpu().double()
    tokens = routed.oracle_tokens
    expected = torch.zeros(len(tokens), 64, dtype=torch.float64)
    for i, token in enumerate(tokens):
        for k, row in enumerate(e2p[token]):
            if row >= 0:
                expected[i] += scales[token, k] * permuted[row]
    return all_close(out[tokens], expected, "unpermuted rows")


@pytest.mark.parametrize("case", MATRIX)
def test_moe_unpermute_matches_a_float64_loop(case: Case):
    verdict = _unpermute_verdict(case, perturb=False)
    assert verdict.ok, verdict.detail


def test_moe_unpermute_negative_control_fails():
    assert not _unpermute_verdict(one_case(), perturb=True).ok
