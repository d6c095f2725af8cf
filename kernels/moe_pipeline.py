"""fused_moe as a pipeline of the ops: quantise -> sort -> permute -> SwiGLU GEMM -> finalize.

A backend whose GEMMs cover the layer can register this as its fused_moe, bound to its name.
"""

from __future__ import annotations

import torch

from stagebot.kernels import ops


def fused_moe(
    *,
    x: torch.Tensor,
    token_selected_experts: torch.Tensor,
    token_final_scales: torch.Tensor,
    w1: torch.Tensor,
    w1_sf: torch.Tensor,
    w1_gs: torch.Tensor,
    w2: torch.Tensor,
    w2_sf: torch.Tensor,
    w2_gs: torch.Tensor,
    fc1_input_gs: torch.Tensor,
    fc2_input_gs: torch.Tensor,
    num_experts: int,
    local_expert_offset: int,
    tile_size: int,
    disable_finalize_fusion: bool,
    deterministic: bool,
    backend: str,
) -> torch.Tensor:
    num_tokens, top_k = token_selected_experts.shape
    fc1_gs, fc2_gs = fc1_input_gs.reshape(1), fc2_input_gs.reshape(1)
    x_fp4, x_sf = ops.nvfp4_quantize(x, fc1_gs)
    tables = ops.moe_sort(
        token_selected_experts,
        token_final_scales,
        num_experts,
        top_k,
        local_expert_offset,
        w1.shape[0],
        tile_size,
    )
    a, a_sf = ops.moe_permute(
        x_fp4,
        x_sf,
        tables.tile_idx_to_mn_limit,
        tables.permuted_idx_to_expanded_idx,
        tables.num_non_exiting_tiles,
        tile_size,
        top_k,
    )
    c, c_sf = ops.grouped_gemm_swiglu(
        a,
        w1,
        a_sf,
        w1_sf,
        1.0 / (fc1_gs * w1_gs),
        tables.tile_idx_to_group_idx,
        tables.num_non_exiting_tiles,
        fc2_gs,
        tile_size=tile_size,
        tile_idx_to_mn_limit=tables.tile_idx_to_mn_limit,
        backend=backend,
    )
    down = (c, w2, c_sf, w2_sf, 1.0 / (fc2_gs * w2_gs))
    if disable_finalize_fusion:
        y = ops.grouped_gemm(
            *down,
            tables.tile_idx_to_group_idx,
            tables.num_non_exiting_tiles,
            tile_size=tile_size,
            tile_idx_to_mn_limit=tables.tile_idx_to_mn_limit,
            backend=backend,
        )
        return ops.moe_unpermute(y, tables.expanded_idx_to_permuted_idx, token_final_scales)
    return ops.grouped_gemm_finalize(
        *down,
        tables.tile_idx_to_group_idx,
        tables.num_non_exiting_tiles,
        tables.tile_idx_to_mn_limit,
        tables.permuted_idx_to_expanded_idx,
        token_final_scales,
        num_tokens=num_tokens,
        tile_size=tile_size,
        deterministic=deterministic,
        backend=backend,
    )
