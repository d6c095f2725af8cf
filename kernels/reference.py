"""The ``reference`` backend: the grouped-GEMM ops in plain torch, on any device.

Operands are decoded to exact fp32 ``e2m1 * e4m3`` values, multiplied with fp32 accumulation
(matmul precision forced to "highest", so no TF32), then scaled by the expert's alpha, as the
kernels do. Sums over a token's top_k rows run in a fixed order, so results are deterministic.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from stagebot.kernels import layouts, moe_pipeline, moe_tables, nvfp4
from stagebot.kernels.backends import Backend, register


@contextmanager
def highest_fp32_matmul() -> Iterator[None]:
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def _values(packed: torch.Tensor, sf_flat: torch.Tensor, rows: int) -> torch.Tensor:
    sf = layouts.unswizzle_sf(sf_flat.reshape(-1), rows, packed.shape[-1] * 2 // nvfp4.BLOCK)
    return nvfp4.block_values(packed, sf)


def _grouped_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    a_sf: torch.Tensor,
    b_sf: torch.Tensor,
    alpha: torch.Tensor,
    tile_idx_to_group_idx: torch.Tensor,
    num_non_exiting_tiles: torch.Tensor,
    tile_size: int,
) -> torch.Tensor:
    """fp32 [m, n]: alpha[e] * (a_tile @ b[e]^T) for each non-exiting tile of expert e, else 0."""
    m = a.shape[0]
    num_experts, n, _ = b.shape
    a_values = _values(a, a_sf, m)
    b_sf = b_sf.reshape(num_experts, -1)
    out = torch.zeros(m, n, dtype=torch.float32, device=a.device)
    tiles = torch.arange(m // tile_size, device=a.device)
    groups = torch.where(tiles < num_non_exiting_tiles, tile_idx_to_group_idx, -1)
    tile_rows = torch.arange(tile_size, device=a.device)
    # ops checked every non-exiting tile's group against [0, num_experts) up front.
    for expert in torch.unique(groups[groups >= 0]).tolist():
        rows = (tiles[groups == expert].unsqueeze(-1) * tile_size + tile_rows).flatten()
        b_values = _values(b[expert], b_sf[expert], n)
        with highest_fp32_matmul():
            out[rows] = (a_values[rows] @ b_values.T) * alpha[expert]
    return out


def grouped_gemm(
    *,
    a,
    b,
    a_sf,
    b_sf,
    alpha,
    tile_idx_to_group_idx,
    num_non_exiting_tiles,
    tile_size,
    tile_idx_to_mn_limit=None,
) -> torch.Tensor:
    """Every row of each non-exiting tile (the mn_limit, a permission to skip, is not used)."""
    del tile_idx_to_mn_limit
    acc = _grouped_matmul(
        a, b, a_sf, b_sf, alpha, tile_idx_to_group_idx, num_non_exiting_tiles, tile_size
    )
    return acc.to(torch.bfloat16)


def grouped_gemm_swiglu(
    *,
    a,
    b,
    a_sf,
    b_sf,
    alpha,
    tile_idx_to_group_idx,
    num_non_exiting_tiles,
    global_sf,
    tile_size,
    tile_idx_to_mn_limit=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    del tile_idx_to_mn_limit  # as in grouped_gemm
    acc = _grouped_matmul(
        a, b, a_sf, b_sf, alpha, tile_idx_to_group_idx, num_non_exiting_tiles, tile_size
    )
    linear_and_gate = layouts.deinterleave_linear_and_gate(acc, layouts.SWIGLU_GROUP_SIZE, dim=-1)
    linear, gate = linear_and_gate.chunk(2, dim=-1)
    c, c_sf = nvfp4.quantize(linear * torch.nn.functional.silu(gate), global_sf)
    return c, layouts.swizzle_sf(c_sf).reshape(-1)


def grouped_gemm_finalize(
    *,
    a,
    b,
    a_sf,
    b_sf,
    alpha,
    tile_idx_to_group_idx,
    num_non_exiting_tiles,
    tile_idx_to_mn_limit,
    permuted_idx_to_expanded_idx,
    token_final_scales,
    num_tokens,
    tile_size,
    deterministic,
    out=None,
    out_zeroed=False,
) -> torch.Tensor:
    """Always deterministic: each token gathers its top_k rows and sums them in k order. An
    ``out_zeroed`` output is added into, as the GPU kernels do (moe_tables.finalize_into)."""
    del deterministic
    acc = _grouped_matmul(
        a, b, a_sf, b_sf, alpha, tile_idx_to_group_idx, num_non_exiting_tiles, tile_size
    )
    top_k = token_final_scales.shape[1]
    slots = num_tokens * top_k
    valid = moe_tables.valid_rows(tile_idx_to_mn_limit, num_non_exiting_tiles, tile_size)
    rows = moe_tables.expanded_to_permuted(permuted_idx_to_expanded_idx, valid, slots)
    sums = moe_tables.moe_unpermute(acc, rows.view(num_tokens, top_k), token_final_scales)
    return moe_tables.finalize_into(out, sums.to(torch.bfloat16), out_zeroed)


def _can_implement(op: str, **args) -> tuple[bool, str]:
    return True, ""


register(
    Backend(
        name="reference",
        priority=0,
        implementations={
            "grouped_gemm": grouped_gemm,
            "grouped_gemm_swiglu": grouped_gemm_swiglu,
            "grouped_gemm_finalize": grouped_gemm_finalize,
            "fused_moe": functools.partial(moe_pipeline.fused_moe, backend="reference"),
        },
        can_implement=_can_implement,
    )
)
