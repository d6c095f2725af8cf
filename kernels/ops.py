"""The NVFP4 MoE op API: every argument is checked up front, then the work runs.

Layouts (K is the reduction size; one e4m3 scale per 16 values):
- packed NVFP4 is uint8 [..., K/2], element 2i in the low nibble;
- swizzled scales are uint8, 128x4-swizzled per matrix: [..., swizzled_sf_size(rows, K/16)];
- grouped-GEMM operands: a [m, K/2] (m a multiple of tile_size) with a_sf of m*K/16 elements;
  b [l, n, K/2] with b_sf of l * swizzled_sf_size(n, K/16) elements in any shape; alpha fp32 [l];
  tile_idx_to_group_idx int32 [m / tile_size]; num_non_exiting_tiles int32 [1].

The grouped GEMMs and fused_moe dispatch to a backend (see stagebot.kernels.backends); the
format, layout and table ops are plain torch and run on any device.
"""

from __future__ import annotations

import torch

from stagebot.kernels import backends, layouts, moe_tables, nvfp4
from stagebot.kernels.moe_tables import MoeSortTables
from stagebot.kernels.validate import (
    check_choice,
    check_finite_positive,
    check_index_range,
    check_multiple,
    check_numel,
    check_positive_int,
    check_shape,
    check_tensor,
    require,
)

TILE_SIZES = (128, 256)
K_ALIGN = 64
SWIGLU_N_ALIGN = 128
FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)


def _check_bool(name: str, value: object) -> None:
    require(isinstance(value, bool), name, f"is {value!r}", "it must be a bool")


def _check_scalar_scale(name: str, t: object, device: torch.device) -> torch.Tensor:
    check_tensor(name, t, torch.float32, device=device)
    check_numel(name, t, 1, "a global scale is one fp32 value")
    check_finite_positive(name, t)
    return t


def _global_scale_grid(
    global_scale: float | torch.Tensor, batch: tuple[int, ...], device: torch.device
) -> torch.Tensor:
    """One fp32 scale, or one per matrix of the batch dims, shaped to broadcast over blocks."""
    if isinstance(global_scale, float):
        check_finite_positive("global_scale", global_scale)
        return torch.tensor(global_scale, dtype=torch.float32, device=device)
    check_tensor("global_scale", global_scale, torch.float32, device=device)
    check_finite_positive("global_scale", global_scale)
    if global_scale.numel() == 1:
        return global_scale.reshape(())
    check_shape("global_scale", global_scale, batch, "one value, or one per matrix of the batch")
    return global_scale.reshape(*batch, 1, 1)


def nvfp4_quantize(
    x: torch.Tensor, global_scale: float | torch.Tensor, *, swizzled: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., M, K] -> (packed uint8 [..., M, K/2], scales uint8).

    Scales are [..., swizzled_sf_size(M, K/16)] when ``swizzled``, else [..., M, K/16].
    ``global_scale`` is one fp32 value or one per matrix ([...]); by convention 448*6/amax.
    """
    _check_bool("swizzled", swizzled)
    check_tensor("x", x, FLOAT_DTYPES, min_ndim=2 if swizzled else 1)
    check_multiple("x", x.shape[-1], nvfp4.BLOCK, "K = x.shape[-1]")
    gs = _global_scale_grid(global_scale, tuple(x.shape[:-2]), x.device)
    packed, sf = nvfp4.quantize(x, gs)
    return packed, layouts.swizzle_sf(sf) if swizzled else sf


def nvfp4_dequantize(
    packed: torch.Tensor,
    scales: torch.Tensor,
    global_scale: float | torch.Tensor,
    *,
    swizzled: bool = True,
    dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """Inverse of nvfp4_quantize up to rounding: e2m1 * e4m3 / global_scale, as ``dtype``."""
    _check_bool("swizzled", swizzled)
    check_choice("dtype", dtype, FLOAT_DTYPES)
    check_tensor("packed", packed, torch.uint8, min_ndim=2 if swizzled else 1)
    check_tensor("scales", scales, torch.uint8, device=packed.device)
    check_multiple("packed", 2 * packed.shape[-1], nvfp4.BLOCK, "K = 2 * packed.shape[-1]")
    cols = 2 * packed.shape[-1] // nvfp4.BLOCK
    if swizzled:
        *batch, rows = packed.shape[:-1]
        size = layouts.swizzled_sf_size(rows, cols)
        check_shape(
            "scales", scales, (*batch, size), "swizzled scales of packed, one run per matrix"
        )
        sf = layouts.unswizzle_sf(scales, rows, cols)
    else:
        check_shape("scales", scales, (*packed.shape[:-1], cols), "one scale per 16 values")
        sf = scales
    gs = _global_scale_grid(global_scale, tuple(packed.shape[:-2]), packed.device)
    return (nvfp4.block_values(packed, sf) / gs).to(dtype)


def swizzle_sf(sf: torch.Tensor) -> torch.Tensor:
    """[..., rows, cols] -> [..., swizzled_sf_size(rows, cols)] in the 128x4 layout."""
    check_tensor("sf", sf, (torch.uint8, torch.float8_e4m3fn), min_ndim=2)
    return layouts.swizzle_sf(sf)


def unswizzle_sf(flat: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """[..., swizzled_sf_size(rows, cols)] -> [..., rows, cols]."""
    check_positive_int("rows", rows)
    check_positive_int("cols", cols)
    check_tensor("flat", flat, (torch.uint8, torch.float8_e4m3fn), min_ndim=1)
    size = layouts.swizzled_sf_size(rows, cols)
    check_shape("flat", flat, (*flat.shape[:-1], size), f"swizzled {rows}x{cols} scales")
    return layouts.unswizzle_sf(flat, rows, cols)


def _check_interleave(w: object, group_size: int, dim: int) -> None:
    require(isinstance(w, torch.Tensor), "w", f"is a {type(w).__name__}", "it must be a tensor")
    check_positive_int("group_size", group_size)
    require(-w.dim() <= dim < w.dim(), "dim", f"is {dim}", f"w has {w.dim()} dims")
    check_multiple("w", w.shape[dim], 2 * group_size, f"w.shape[{dim}] (2 * group_size groups)")


def interleave_linear_and_gate(
    w: torch.Tensor, group_size: int = layouts.SWIGLU_GROUP_SIZE, *, dim: int
) -> torch.Tensor:
    """[linear; gate] along ``dim`` -> lin[0:g], gate[0:g], lin[g:2g], ... (the SwiGLU layout)."""
    _check_interleave(w, group_size, dim)
    return layouts.interleave_linear_and_gate(w, group_size, dim)


def deinterleave_linear_and_gate(
    w: torch.Tensor, group_size: int = layouts.SWIGLU_GROUP_SIZE, *, dim: int
) -> torch.Tensor:
    _check_interleave(w, group_size, dim)
    return layouts.deinterleave_linear_and_gate(w, group_size, dim)


def _check_local_experts(num_experts: int, local_expert_offset: int, num_local: int) -> None:
    check_positive_int("num_experts", num_experts)
    check_positive_int("num_local_experts", num_local)
    require(
        isinstance(local_expert_offset, int) and local_expert_offset >= 0,
        "local_expert_offset",
        f"is {local_expert_offset!r}",
        "it must be an int >= 0",
    )
    require(
        local_expert_offset + num_local <= num_experts,
        "local_expert_offset",
        f"is {local_expert_offset} with {num_local} local experts",
        f"the local experts must lie inside the {num_experts} experts",
    )


def moe_sort(
    token_selected_experts: torch.Tensor,
    token_final_scales: torch.Tensor,
    num_experts: int,
    top_k: int,
    local_expert_offset: int,
    num_local_experts: int,
    tile_size: int,
) -> MoeSortTables:
    """Sorts each (token, k) routed to a local expert into that expert's tiles (see moe_tables)."""
    check_positive_int("top_k", top_k)
    check_choice("tile_size", tile_size, TILE_SIZES)
    _check_local_experts(num_experts, local_expert_offset, num_local_experts)
    require(
        top_k <= num_experts, "top_k", f"is {top_k}", f"it must be <= num_experts ({num_experts})"
    )
    tse = check_tensor("token_selected_experts", token_selected_experts, INDEX_DTYPES, ndim=2)
    require(
        tse.shape[0] >= 1 and tse.shape[1] == top_k,
        "token_selected_experts",
        f"has shape {tuple(tse.shape)}",
        f"it must be [num_tokens >= 1, top_k = {top_k}]",
    )
    check_tensor("token_final_scales", token_final_scales, torch.float32, device=tse.device)
    check_shape("token_final_scales", token_final_scales, tse.shape, "one per (token, k)")
    low, high = tse.min().item(), tse.max().item()
    require(
        low >= 0 and high < num_experts,
        "token_selected_experts",
        f"holds experts in [{low}, {high}]",
        f"they must lie in [0, num_experts = {num_experts})",
    )
    return moe_tables.moe_sort(tse, local_expert_offset, num_local_experts, tile_size)


def _check_tile_tables(
    tile_idx_to_mn_limit: torch.Tensor,
    num_non_exiting_tiles: torch.Tensor,
    num_rows: int,
    tile_size: int,
    device: torch.device,
) -> None:
    check_tensor("tile_idx_to_mn_limit", tile_idx_to_mn_limit, torch.int32, ndim=1, device=device)
    check_shape(
        "tile_idx_to_mn_limit", tile_idx_to_mn_limit, (num_rows // tile_size,), "one per tile"
    )
    check_tensor("num_non_exiting_tiles", num_non_exiting_tiles, torch.int32, device=device)
    check_numel("num_non_exiting_tiles", num_non_exiting_tiles, 1, "a count")


def _check_tile_values(
    num_non_exiting_tiles: torch.Tensor,
    num_tiles: int,
    tile_size: int,
    *,
    tile_idx_to_group_idx: torch.Tensor | None = None,
    num_experts: int = 0,
    tile_idx_to_mn_limit: torch.Tensor | None = None,
) -> int:
    """The table values the ops index with (one host sync each): returns the tile count."""
    nnet = int(num_non_exiting_tiles.reshape(-1)[0])
    require(
        0 <= nnet <= num_tiles,
        "num_non_exiting_tiles",
        f"is {nnet}",
        f"it must lie in [0, {num_tiles}] (the rows hold {num_tiles} tiles of {tile_size})",
    )
    if tile_idx_to_group_idx is not None:
        check_index_range(
            "tile_idx_to_group_idx",
            tile_idx_to_group_idx[:nnet],
            0,
            num_experts,
            f"the experts of b: b.shape[0] = {num_experts}",
            " for the non-exiting tiles",
        )
    if tile_idx_to_mn_limit is not None:
        start = torch.arange(nnet, device=tile_idx_to_mn_limit.device) * tile_size
        check_index_range(
            "tile_idx_to_mn_limit",
            tile_idx_to_mn_limit[:nnet].long() - start,
            0,
            tile_size + 1,
            "each non-exiting tile's limit minus its first row: the limit lies in its tile",
            " (minus each tile's first row)",
        )
    return nnet


def _check_valid_row_targets(
    name: str,
    table: torch.Tensor,
    tile_idx_to_mn_limit: torch.Tensor,
    nnet: int,
    tile_size: int,
    high: int,
    rule: str,
) -> None:
    valid = moe_tables.valid_rows(tile_idx_to_mn_limit, nnet, tile_size)
    check_index_range(name, table[valid], 0, high, rule, " in valid rows")


def moe_permute(
    x: torch.Tensor,
    x_scales: torch.Tensor,
    tile_idx_to_mn_limit: torch.Tensor,
    permuted_idx_to_expanded_idx: torch.Tensor,
    num_non_exiting_tiles: torch.Tensor,
    tile_size: int,
    top_k: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gathers packed rows x[expanded // top_k] (and scales) into the valid permuted rows.

    x [T, K/2] uint8 with swizzled x_scales -> (a [m, K/2], a_sf [m*K/16] swizzled); rows that
    are not valid are zero.
    """
    check_choice("tile_size", tile_size, TILE_SIZES)
    check_positive_int("top_k", top_k)
    check_tensor("x", x, torch.uint8, ndim=2)
    check_multiple("x", 2 * x.shape[1], nvfp4.BLOCK, "K = 2 * x.shape[1]")
    check_tensor("x_scales", x_scales, torch.uint8, device=x.device)
    size = layouts.swizzled_sf_size(x.shape[0], 2 * x.shape[1] // nvfp4.BLOCK)
    check_numel("x_scales", x_scales, size, "the swizzled scales of x")
    p2e = check_tensor(
        "permuted_idx_to_expanded_idx",
        permuted_idx_to_expanded_idx,
        torch.int32,
        ndim=1,
        device=x.device,
    )
    check_multiple("permuted_idx_to_expanded_idx", p2e.numel(), tile_size, "its length")
    _check_tile_tables(
        tile_idx_to_mn_limit, num_non_exiting_tiles, p2e.numel(), tile_size, x.device
    )
    nnet = _check_tile_values(
        num_non_exiting_tiles,
        p2e.numel() // tile_size,
        tile_size,
        tile_idx_to_mn_limit=tile_idx_to_mn_limit,
    )
    _check_valid_row_targets(
        "permuted_idx_to_expanded_idx",
        p2e,
        tile_idx_to_mn_limit,
        nnet,
        tile_size,
        x.shape[0] * top_k,
        f"expanded indices: x.shape[0] * top_k = {x.shape[0]} * {top_k}",
    )
    return moe_tables.moe_permute(
        x, x_scales, tile_idx_to_mn_limit, p2e, num_non_exiting_tiles, tile_size, top_k
    )


def moe_unpermute(
    permuted: torch.Tensor,
    expanded_idx_to_permuted_idx: torch.Tensor,
    token_final_scales: torch.Tensor,
) -> torch.Tensor:
    """out[t] = sum_k [idx >= 0] * permuted[idx[t, k]] * scale[t, k], fp32 accumulation."""
    check_tensor("permuted", permuted, FLOAT_DTYPES, ndim=2)
    e2p = check_tensor(
        "expanded_idx_to_permuted_idx",
        expanded_idx_to_permuted_idx,
        torch.int32,
        ndim=2,
        device=permuted.device,
    )
    check_tensor("token_final_scales", token_final_scales, torch.float32, device=permuted.device)
    check_shape("token_final_scales", token_final_scales, e2p.shape, "one per (token, k)")
    check_index_range(
        "expanded_idx_to_permuted_idx",
        e2p,
        -1,
        permuted.shape[0],
        f"rows of permuted ({permuted.shape[0]}), or -1 for a non-local (token, k)",
    )
    return moe_tables.moe_unpermute(permuted, e2p, token_final_scales)


def _check_grouped_operands(
    a,
    b,
    a_sf,
    b_sf,
    alpha,
    tile_idx_to_group_idx,
    num_non_exiting_tiles,
    tile_size,
    backend,
    tile_idx_to_mn_limit=None,
) -> tuple[int, int, int]:
    """Checks what every grouped GEMM takes (and the limits, if given); returns (m, n, K)."""
    require(isinstance(backend, str), "backend", f"is {backend!r}", "it must be a backend name")
    check_choice("tile_size", tile_size, TILE_SIZES)
    check_tensor("a", a, torch.uint8, ndim=2)
    device = a.device
    check_tensor("b", b, torch.uint8, ndim=3, device=device)
    (m, half_k), (experts, n, _) = a.shape, b.shape
    k = 2 * half_k
    check_multiple("a", k, K_ALIGN, "K = 2 * a.shape[1]")
    check_multiple("a", m, tile_size, "m = a.shape[0] (rows come in whole tiles)")
    check_shape("b", b, (experts, n, half_k), "[experts, n, K/2], K shared with a")
    require(experts >= 1 and n >= 1, "b", f"has shape {tuple(b.shape)}", "it must not be empty")
    check_tensor("a_sf", a_sf, torch.uint8, device=device)
    check_numel("a_sf", a_sf, m * k // nvfp4.BLOCK, "the swizzled scales of a")
    check_tensor("b_sf", b_sf, torch.uint8, device=device)
    per_expert = layouts.swizzled_sf_size(n, k // nvfp4.BLOCK)
    check_numel("b_sf", b_sf, experts * per_expert, "the swizzled scales of b, one run per expert")
    check_tensor("alpha", alpha, torch.float32, device=device)
    check_shape("alpha", alpha, (experts,), "one fp32 alpha per expert")
    check_tensor("tile_idx_to_group_idx", tile_idx_to_group_idx, torch.int32, ndim=1, device=device)
    check_shape("tile_idx_to_group_idx", tile_idx_to_group_idx, (m // tile_size,), "one per tile")
    check_tensor("num_non_exiting_tiles", num_non_exiting_tiles, torch.int32, device=device)
    check_numel("num_non_exiting_tiles", num_non_exiting_tiles, 1, "a count")
    if tile_idx_to_mn_limit is not None:
        _check_tile_tables(tile_idx_to_mn_limit, num_non_exiting_tiles, m, tile_size, device)
    _check_tile_values(
        num_non_exiting_tiles,
        m // tile_size,
        tile_size,
        tile_idx_to_group_idx=tile_idx_to_group_idx,
        num_experts=experts,
        tile_idx_to_mn_limit=tile_idx_to_mn_limit,
    )
    return m, n, k


def grouped_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_sf: torch.Tensor,
    b_sf: torch.Tensor,
    alpha: torch.Tensor,
    tile_idx_to_group_idx: torch.Tensor,
    num_non_exiting_tiles: torch.Tensor,
    *,
    tile_size: int,
    tile_idx_to_mn_limit: torch.Tensor | None = None,
    backend: str = backends.AUTO,
) -> torch.Tensor:
    """bf16 [m, n]: alpha[e] * a_tile @ b[e]^T per non-exiting tile of expert e.

    Tiles at or past num_non_exiting_tiles are not written. Given ``tile_idx_to_mn_limit``, a
    backend may skip the rows at or past their tile's limit, which then hold anything.
    """
    _check_grouped_operands(
        a,
        b,
        a_sf,
        b_sf,
        alpha,
        tile_idx_to_group_idx,
        num_non_exiting_tiles,
        tile_size,
        backend,
        tile_idx_to_mn_limit,
    )
    return backends.dispatch(
        "grouped_gemm",
        backend,
        a=a,
        b=b,
        a_sf=a_sf,
        b_sf=b_sf,
        alpha=alpha,
        tile_idx_to_group_idx=tile_idx_to_group_idx,
        num_non_exiting_tiles=num_non_exiting_tiles,
        tile_idx_to_mn_limit=tile_idx_to_mn_limit,
        tile_size=tile_size,
    )


def grouped_gemm_swiglu(
    a: torch.Tensor,
    b: torch.Tensor,
    a_sf: torch.Tensor,
    b_sf: torch.Tensor,
    alpha: torch.Tensor,
    tile_idx_to_group_idx: torch.Tensor,
    num_non_exiting_tiles: torch.Tensor,
    global_sf: torch.Tensor,
    *,
    tile_size: int,
    tile_idx_to_mn_limit: torch.Tensor | None = None,
    backend: str = backends.AUTO,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(c [m, n/4] packed, c_sf [m*n/32] swizzled): NVFP4(linear * silu(gate), global_sf).

    b's rows hold linear and gate interleaved in 64-row groups (interleave_linear_and_gate);
    n = 2 * intermediate must be a multiple of 128. ``tile_idx_to_mn_limit``: as in grouped_gemm.
    """
    _, n, _ = _check_grouped_operands(
        a,
        b,
        a_sf,
        b_sf,
        alpha,
        tile_idx_to_group_idx,
        num_non_exiting_tiles,
        tile_size,
        backend,
        tile_idx_to_mn_limit,
    )
    check_multiple("b", n, SWIGLU_N_ALIGN, "SwiGLU N = b.shape[1] = 2 * intermediate")
    _check_scalar_scale("global_sf", global_sf, a.device)
    return backends.dispatch(
        "grouped_gemm_swiglu",
        backend,
        a=a,
        b=b,
        a_sf=a_sf,
        b_sf=b_sf,
        alpha=alpha,
        tile_idx_to_group_idx=tile_idx_to_group_idx,
        num_non_exiting_tiles=num_non_exiting_tiles,
        global_sf=global_sf,
        tile_idx_to_mn_limit=tile_idx_to_mn_limit,
        tile_size=tile_size,
    )


def grouped_gemm_finalize(
    a: torch.Tensor,
    b: torch.Tensor,
    a_sf: torch.Tensor,
    b_sf: torch.Tensor,
    alpha: torch.Tensor,
    tile_idx_to_group_idx: torch.Tensor,
    num_non_exiting_tiles: torch.Tensor,
    tile_idx_to_mn_limit: torch.Tensor,
    permuted_idx_to_expanded_idx: torch.Tensor,
    token_final_scales: torch.Tensor,
    *,
    num_tokens: int,
    tile_size: int,
    deterministic: bool = False,
    out: torch.Tensor | None = None,
    out_zeroed: bool = False,
    backend: str = backends.AUTO,
) -> torch.Tensor:
    """bf16 [num_tokens, n]: each valid row's GEMM result, times its router weight, summed into
    its token (the rows of tokens with none are zero). ``deterministic`` asks for bit-identical
    results run to run (no atomics). The result goes to ``out`` if given (bf16 [num_tokens, n],
    contiguous), else to a new tensor. ``out_zeroed`` says the caller has zeroed all of ``out``
    (fused_moe's ``zero_output_aside=True`` does it on a side stream while GEMM1 runs): the
    sums are then only added into it; without it every element is written here."""
    m, n, _ = _check_grouped_operands(
        a, b, a_sf, b_sf, alpha, tile_idx_to_group_idx, num_non_exiting_tiles, tile_size, backend
    )
    _check_bool("deterministic", deterministic)
    check_positive_int("num_tokens", num_tokens)
    _check_finalize_out(out, out_zeroed, num_tokens, n, a.device)
    _check_tile_tables(tile_idx_to_mn_limit, num_non_exiting_tiles, m, tile_size, a.device)
    check_tensor(
        "permuted_idx_to_expanded_idx",
        permuted_idx_to_expanded_idx,
        torch.int32,
        device=a.device,
    )
    check_shape("permuted_idx_to_expanded_idx", permuted_idx_to_expanded_idx, (m,), "one per row")
    check_tensor("token_final_scales", token_final_scales, torch.float32, ndim=2, device=a.device)
    require(
        token_final_scales.shape[0] == num_tokens,
        "token_final_scales",
        f"has shape {tuple(token_final_scales.shape)}",
        f"it must be [num_tokens = {num_tokens}, top_k]",
    )
    top_k = token_final_scales.shape[1]
    nnet = _check_tile_values(
        num_non_exiting_tiles, m // tile_size, tile_size, tile_idx_to_mn_limit=tile_idx_to_mn_limit
    )
    _check_valid_row_targets(
        "permuted_idx_to_expanded_idx",
        permuted_idx_to_expanded_idx,
        tile_idx_to_mn_limit,
        nnet,
        tile_size,
        num_tokens * top_k,
        f"expanded indices: num_tokens * top_k = {num_tokens} * {top_k}",
    )
    return backends.dispatch(
        "grouped_gemm_finalize",
        backend,
        a=a,
        b=b,
        a_sf=a_sf,
        b_sf=b_sf,
        alpha=alpha,
        tile_idx_to_group_idx=tile_idx_to_group_idx,
        num_non_exiting_tiles=num_non_exiting_tiles,
        tile_idx_to_mn_limit=tile_idx_to_mn_limit,
        permuted_idx_to_expanded_idx=permuted_idx_to_expanded_idx,
        token_final_scales=token_final_scales,
        num_tokens=num_tokens,
        tile_size=tile_size,
        deterministic=deterministic,
        out=out,
        out_zeroed=out_zeroed,
    )


def _check_finalize_out(
    out: object, out_zeroed: object, num_tokens: int, n: int, device: torch.device
) -> None:
    _check_bool("out_zeroed", out_zeroed)
    if out is None:
        require(
            not out_zeroed,
            "out_zeroed",
            "is True without out",
            "it says the out tensor passed is already zero: pass out, or out_zeroed=False",
        )
        return
    check_tensor("out", out, torch.bfloat16, device=device)
    check_shape("out", out, (num_tokens, n), "[num_tokens, n]")
    require(out.is_contiguous(), "out", "is not contiguous", "it must be contiguous")


def fused_moe(
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
    *,
    num_experts: int,
    local_expert_offset: int,
    tile_size: int,
    disable_finalize_fusion: bool = False,
    deterministic: bool = False,
    backend: str = backends.AUTO,
) -> torch.Tensor:
    """The MoE layer on this rank's experts: bf16 [T, hidden].

    x [T, hidden]; w1 [l, 2*inter, hidden/2] (linear and gate interleaved in 64-row groups) with
    swizzled w1_sf and fp32 w1_gs [l]; w2 [l, hidden, inter/2] with w2_sf, w2_gs [l];
    fc1_input_gs and fc2_input_gs are the layer's static activation global scales.
    ``disable_finalize_fusion`` runs grouped_gemm + moe_unpermute instead of the fused finalize.
    """
    require(isinstance(backend, str), "backend", f"is {backend!r}", "it must be a backend name")
    check_choice("tile_size", tile_size, TILE_SIZES)
    _check_bool("disable_finalize_fusion", disable_finalize_fusion)
    _check_bool("deterministic", deterministic)
    check_tensor("x", x, FLOAT_DTYPES, ndim=2)
    device = x.device
    num_tokens, hidden = x.shape
    check_multiple("x", hidden, K_ALIGN, "hidden = x.shape[1]")
    tse = check_tensor(
        "token_selected_experts", token_selected_experts, INDEX_DTYPES, ndim=2, device=device
    )
    check_shape("token_selected_experts", tse, (num_tokens, tse.shape[1]), "one row per token")
    check_tensor("token_final_scales", token_final_scales, torch.float32, device=device)
    check_shape("token_final_scales", token_final_scales, tse.shape, "one per (token, k)")
    check_tensor("w1", w1, torch.uint8, ndim=3, device=device)
    experts, two_inter, _ = w1.shape
    check_multiple("w1", two_inter, SWIGLU_N_ALIGN, "SwiGLU N = w1.shape[1] = 2 * intermediate")
    _check_local_experts(num_experts, local_expert_offset, experts)
    check_shape("w1", w1, (experts, two_inter, hidden // 2), "[experts, 2 * inter, hidden / 2]")
    check_tensor("w2", w2, torch.uint8, ndim=3, device=device)
    check_shape("w2", w2, (experts, hidden, two_inter // 4), "[experts, hidden, inter / 2]")
    for name, sf, rows, k in (
        ("w1_sf", w1_sf, two_inter, hidden),
        ("w2_sf", w2_sf, hidden, two_inter // 2),
    ):
        check_tensor(name, sf, torch.uint8, device=device)
        size = layouts.swizzled_sf_size(rows, k // nvfp4.BLOCK)
        check_numel(name, sf, experts * size, "swizzled scales, one run per expert")
    for name, gs in (("w1_gs", w1_gs), ("w2_gs", w2_gs)):
        check_tensor(name, gs, torch.float32, device=device)
        check_shape(name, gs, (experts,), "one global scale per local expert")
        check_finite_positive(name, gs)
    _check_scalar_scale("fc1_input_gs", fc1_input_gs, device)
    _check_scalar_scale("fc2_input_gs", fc2_input_gs, device)
    return backends.dispatch(
        "fused_moe",
        backend,
        x=x,
        token_selected_experts=token_selected_experts,
        token_final_scales=token_final_scales,
        w1=w1,
        w1_sf=w1_sf,
        w1_gs=w1_gs,
        w2=w2,
        w2_sf=w2_sf,
        w2_gs=w2_gs,
        fc1_input_gs=fc1_input_gs,
        fc2_input_gs=fc2_input_gs,
        num_experts=num_experts,
        local_expert_offset=local_expert_offset,
        tile_size=tile_size,
        disable_finalize_fusion=disable_finalize_fusion,
        deterministic=deterministic,
    )
