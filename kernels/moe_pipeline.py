"""fused_moe as a pipeline of the ops: quantise -> sort -> permute -> SwiGLU GEMM -> finalize.

A backend whose GEMMs cover the layer can register this as its fused_moe, bound to its name.
``checked=False`` runs the same pipeline on the steps' implementations, without the op API's
argument checks (which synchronise the host): the layer benchmark times it that way, as it times
the GEMMs, so that it can replay the layer from a CUDA graph.

The fused finalize adds into its output, which must be zero first. Zeroing it inside the
finalize kernel cost the first layer's 8192 tokens 44 us of the kernel's 159 (its 7168 tokens
routed elsewhere have rows too: NOTES.md, fifteenth session); it needs nothing the layer
computes, so the pipeline zeroes it on a side stream from the start (on CUDA), beside the
routing steps and GEMM1, joins before GEMM2, and tells the finalize ``out_zeroed``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import torch

from stagebot.kernels import backends, layouts, moe_tables, nvfp4, ops


class Steps(NamedTuple):
    """The pipeline's steps. The GEMMs take the op API's keyword arguments, less ``backend``."""

    quantize: Callable  # (x, global scale [1]) -> (packed, swizzled scales)
    sort: Callable  # as moe_tables.moe_sort: (experts [T, top_k], offset, local, tile) -> tables
    permute: Callable  # as ops.moe_permute
    unpermute: Callable  # as ops.moe_unpermute
    gemm: Callable
    gemm_swiglu: Callable
    gemm_finalize: Callable
    zeroed_output: Callable  # (num_tokens, n, device) -> (out zeroed aside, join before reading)


def checked_steps(backend: str, token_final_scales: torch.Tensor, num_experts: int) -> Steps:
    """The op API's functions: every argument checked, the GEMMs dispatched to ``backend``."""

    def sort(tse, offset, local, tile):
        top_k = tse.shape[1]
        return ops.moe_sort(tse, token_final_scales, num_experts, top_k, offset, local, tile)

    def gemm(op):
        return functools.partial(getattr(ops, op), backend=backend)

    return Steps(
        ops.nvfp4_quantize,
        sort,
        ops.moe_permute,
        ops.moe_unpermute,
        gemm("grouped_gemm"),
        gemm("grouped_gemm_swiglu"),
        gemm("grouped_gemm_finalize"),
        zeroed_aside,
    )


def unchecked_steps(backend: str) -> Steps:
    """``backend``'s implementations and the plain torch steps, nothing checked, no host sync."""

    def quantize(x, global_scale):
        packed, sf = nvfp4.quantize(x, global_scale)
        return packed, layouts.swizzle_sf(sf)

    impls = {b.name: b for b in backends.registered()}[backend].implementations
    return Steps(
        quantize,
        moe_tables.moe_sort,
        moe_tables.moe_permute,
        moe_tables.moe_unpermute,
        impls["grouped_gemm"],
        impls["grouped_gemm_swiglu"],
        impls["grouped_gemm_finalize"],
        zeroed_aside,
    )


@functools.cache
def _side_stream(device: torch.device) -> torch.cuda.Stream:
    return torch.cuda.Stream(device)


def zero_aside(out: torch.Tensor) -> Callable[[], None]:
    """Zeroes ``out`` on a side stream while the current one goes on; returns the join that
    makes the current stream wait for it (call it before anything reads ``out``; a CUDA graph
    captures the two as branches). Off CUDA: zeroed here, the join does nothing."""
    if out.device.type != "cuda":
        out.zero_()
        return lambda: None
    main, side = torch.cuda.current_stream(out.device), _side_stream(out.device)
    side.wait_stream(main)  # out's memory is the current stream's: what wrote it before
    with torch.cuda.stream(side):
        out.zero_()
    return lambda: main.wait_stream(side)


def zeroed_aside(num_tokens: int, n: int, device: torch.device) -> tuple[torch.Tensor, Callable]:
    """A new bf16 [num_tokens, n] zeroed aside (``zero_aside``), and its join."""
    out = torch.empty(num_tokens, n, dtype=torch.bfloat16, device=device)
    return out, zero_aside(out)


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
    checked: bool = True,
    zero_output_aside: bool = False,
) -> torch.Tensor:
    """``zero_output_aside=True`` zeroes the output on a side stream beside the steps before
    GEMM2 and runs the finalize without its own fill. The finalize kernel alone then reaches
    1.05x the bf16 GEMM at the first layer's 8192 tokens, but the whole layer measured 0.5-1.8 %
    slower at decode (the fork and the join) and no faster at 8192 tokens (H200, NOTES.md's
    sixteenth session), so the finalize zeroes its own output by default. The deterministic
    finalize writes every element and needs neither."""
    steps = (
        checked_steps(backend, token_final_scales, num_experts)
        if checked
        else unchecked_steps(backend)
    )
    num_tokens, top_k = token_selected_experts.shape
    fc1_gs, fc2_gs = fc1_input_gs.reshape(1), fc2_input_gs.reshape(1)
    aside = zero_output_aside and not (disable_finalize_fusion or deterministic)
    out, join = steps.zeroed_output(num_tokens, w2.shape[1], x.device) if aside else (None, None)
    try:
        x_fp4, x_sf = steps.quantize(x, fc1_gs)
        tables = steps.sort(token_selected_experts, local_expert_offset, w1.shape[0], tile_size)
        a, a_sf = steps.permute(
            x_fp4,
            x_sf,
            tables.tile_idx_to_mn_limit,
            tables.permuted_idx_to_expanded_idx,
            tables.num_non_exiting_tiles,
            tile_size,
            top_k,
        )
        grouped = dict(
            tile_idx_to_group_idx=tables.tile_idx_to_group_idx,
            num_non_exiting_tiles=tables.num_non_exiting_tiles,
            tile_idx_to_mn_limit=tables.tile_idx_to_mn_limit,
            tile_size=tile_size,
        )
        alpha1 = 1.0 / (fc1_gs * w1_gs)
        c, c_sf = steps.gemm_swiglu(
            a=a, b=w1, a_sf=a_sf, b_sf=w1_sf, alpha=alpha1, global_sf=fc2_gs, **grouped
        )
    finally:  # joined on every path: a failed step must not leave the zeroing racing a reuse
        if join is not None:
            join()
    down = dict(a=c, b=w2, a_sf=c_sf, b_sf=w2_sf, alpha=1.0 / (fc2_gs * w2_gs), **grouped)
    if disable_finalize_fusion:
        y = steps.gemm(**down)
        return steps.unpermute(y, tables.expanded_idx_to_permuted_idx, token_final_scales)
    return steps.gemm_finalize(
        **down,
        permuted_idx_to_expanded_idx=tables.permuted_idx_to_expanded_idx,
        token_final_scales=token_final_scales,
        num_tokens=num_tokens,
        deterministic=deterministic,
        out=out,
        out_zeroed=aside,
    )
