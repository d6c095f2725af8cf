"""Host launchers: torch tensors in, the compiled CuTe kernel run on the current stream.

Arguments are assumed already checked by stagebot.kernels.ops (shapes, dtypes, devices); what
only the kernel requires (a tactic that fits, alignment) is checked here and raises
KernelArgumentError.
"""

from __future__ import annotations

import functools

import torch

from stagebot.kernels import layouts
from stagebot.kernels.cute.compile import (
    DTYPES,
    KERNEL_EPILOGUE,
    POINTER_ALIGNS,
    CompileKey,
    compile_kernel,
    kernel_class,
    pointer_dtypes,
)
from stagebot.kernels.cute.tactics import DEFAULT_TACTIC, Tactic, effective
from stagebot.kernels.errors import KernelArgumentError

ARCH = "sm_90a"
SM100_ARCH = "sm_100a"  # blockscaled tactics (compiled, not run on hardware)
TMA_ALIGN = 16
OUTPUTS = ("c", "c_sf")


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def grid_ctas(tactic: Tactic, m: int, n: int, tile_size: int, sms: int) -> int:
    """The persistent grid: the tactic's CTAs per SM on every SM, at most one per work item
    (the WGMMA kernel's CTA tiles; the weight-rows kernels' (table tiles, weight-row block)
    pairs, two tiles per item where the item's tokens span two)."""
    bm, bn = tactic.tile_mn
    items = -(-m // (max(tile_size, bm) if tactic.swap_ab else bm)) * (n // bn)

    return max(1, min(sms * tactic.ctas_per_sm, items))


def problem_support(
    tactic: Tactic,
    a: torch.Tensor,
    b: torch.Tensor,
    a_sf: torch.Tensor,
    b_sf: torch.Tensor,
    tile_size: int,
    kernel: str = "grouped_gemm",
) -> tuple[bool, str]:
    """(ok, reason): the tactic's predicates plus what the launcher needs of the tensors."""
    _, n, half_k = b.shape
    ok, why = kernel_class(tactic).can_implement(
        tactic, n, 2 * half_k, tile_size, KERNEL_EPILOGUE[kernel]
    )
    if not ok:
        return ok, why
    why = alignment_problem({"a": a, "b": b, "a_sf": a_sf, "b_sf": b_sf}, "TMA")
    return not why, why


def alignment_problem(tensors: dict[str, torch.Tensor], user: str) -> str:
    """'' if every tensor is dense and 16-byte aligned (what ``user`` needs), else what is not."""
    for name, t in tensors.items():
        if not t.is_contiguous() or t.data_ptr() % TMA_ALIGN:
            return f"{name} must be contiguous and {TMA_ALIGN}-byte aligned for {user}"
    return ""


def _run(
    kernel: str,
    tactic: Tactic,
    operands: tuple[torch.Tensor, ...],
    tile_size: int,
    epilogue_tensors: dict[str, torch.Tensor],
    limit: torch.Tensor | None = None,
    top_k: int = 1,
    variant: str = "",
    num_tokens: int = 0,
    zeroed_output: bool = False,
) -> None:
    """Compiles (cached) and launches ``kernel``; epilogue tensors it does not read may be absent
    (their pointers then repeat ``a``'s, never dereferenced). Small inputs that are not dense
    are made dense (the kernel indexes them as flat arrays); outputs must be dense. A finalize
    kernel that fills its output (``fills_finalize_output``) takes a zeroed workspace ("work")
    and ``num_tokens``; one built with ``zeroed_output`` only adds into an output already zero."""
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    a, b, a_sf, b_sf, alpha, group, num_tiles = operands
    # A sparse_rows tactic without the tile limits is its dense twin: one kernel, one cache
    # entry, and the key the suite's warm plans for a case pinned to either (conftest).
    tactic = effective(tactic, reads_limit=limit is not None)
    ok, why = problem_support(tactic, a, b, a_sf, b_sf, tile_size, kernel)
    if not ok:
        raise KernelArgumentError(f"the cute {kernel} cannot take this call: {why}")
    outputs = {name: epilogue_tensors[name] for name in OUTPUTS if name in epilogue_tensors}
    why = alignment_problem(outputs, "the epilogue's vector stores")
    if why:
        raise KernelArgumentError(f"the cute {kernel} cannot take this call: output {why}")
    m, half_k = a.shape
    experts, n, _ = b.shape
    if limit is not None:
        epilogue_tensors = {**epilogue_tensors, "limit": limit}
    key = CompileKey(
        kernel,
        tactic,
        DTYPES[kernel],
        n,
        2 * half_k,
        experts,
        tile_size,
        SM100_ARCH if tactic.blockscaled else ARCH,
        mn_limit=limit is not None,
        top_k=top_k,
        variant=variant,
        zeroed_output=zeroed_output,
    )
    compiled = compile_kernel(key)
    if tactic.fp16_operand == "a":  # the valid tiles' rows only
        order = "registers" if tactic.swap_ab else "smem"
        a = _fp16_operand(a, a_sf, num_tiles.reshape(1).to(torch.int32), tile_size, order)
    if tactic.fp16_operand == "b":
        b = _fp16_operand(b.reshape(experts * n, half_k), b_sf).reshape(experts, n, 2 * half_k)
    names = ("limit", "c", "c_sf", "global_sf", "p2e", "router", "work")
    epilogue = [epilogue_tensors.get(name, a) for name in names]
    small = [t.contiguous() for t in (alpha, group, num_tiles)]
    tensors = [a, b, a_sf, b_sf, *small] + [
        t if name in OUTPUTS else t.contiguous() for name, t in zip(names, epilogue, strict=True)
    ]
    pointers = [
        make_ptr(dtype, t.data_ptr(), cute.AddressSpace.gmem, assumed_align=align)
        for t, dtype, align in zip(
            tensors, pointer_dtypes(kernel, tactic), POINTER_ALIGNS, strict=True
        )
    ]
    grid = grid_ctas(tactic, m, n, tile_size, _sm_count(a.device.index or 0))
    stream = cuda.CUstream(torch.cuda.current_stream(a.device).cuda_stream)
    compiled(*pointers, cutlass.Int32(m), cutlass.Int32(grid), cutlass.Int32(num_tokens), stream)


def _fp16_operand(
    packed: torch.Tensor,
    sf: torch.Tensor,
    valid_tiles=None,
    tile_size: int = 128,
    order: str = "smem",
) -> torch.Tensor:
    """The operand the kernel loads as fp16 (its scales are then not read)."""
    from stagebot.kernels.triton_elementwise import nvfp4_operand

    return nvfp4_operand(packed, sf, valid_tiles, tile_size, order)


def grouped_gemm_outputs(
    a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    return torch.empty(a.shape[0], b.shape[1], dtype=dtype, device=a.device)


def swiglu_outputs(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed c [m, n/4], swizzled c_sf), uninitialised."""
    m, n = a.shape[0], b.shape[1]
    return (
        torch.empty(m, n // 4, dtype=torch.uint8, device=a.device),
        torch.empty(layouts.swizzled_sf_size(m, n // 32), dtype=torch.uint8, device=a.device),
    )


def finalize_outputs(a: torch.Tensor, b: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """Uninitialised: grouped_gemm_finalize writes every element."""
    return torch.empty(num_tokens, b.shape[1], dtype=torch.bfloat16, device=a.device)


def _finalize_fill(tactic: Tactic, out: torch.Tensor, zeroed: bool) -> dict[str, torch.Tensor]:
    """Before a finalize launch: nothing if the caller zeroed ``out``; else the zeroed workspace
    of a kernel that fills its output inside (stagebot.kernels.cute.finalize_fill), or the
    output zeroed here."""
    from stagebot.kernels.cute.finalize_fill import workspace_words

    if zeroed:
        return {}
    if kernel_class(tactic).fills_finalize_output(tactic):
        words = workspace_words(out.shape[0])
        return {"work": torch.zeros(words, dtype=torch.int32, device=out.device)}
    out.zero_()
    return {}


def grouped_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_sf: torch.Tensor,
    b_sf: torch.Tensor,
    alpha: torch.Tensor,
    tile_idx_to_group_idx: torch.Tensor,
    num_non_exiting_tiles: torch.Tensor,
    tile_size: int,
    *,
    tile_idx_to_mn_limit: torch.Tensor | None = None,
    tactic: Tactic = DEFAULT_TACTIC,
    out: torch.Tensor | None = None,
    _variant: str = "",
) -> torch.Tensor:
    """bf16 [m, n] (fp32 if ``out`` is fp32); rows of exiting tiles are left as they were in
    ``out`` (or uninitialised); given ``tile_idx_to_mn_limit``, rows past their tile's limit
    may hold anything."""
    operands = (a, b, a_sf, b_sf, alpha, tile_idx_to_group_idx, num_non_exiting_tiles)
    out = grouped_gemm_outputs(a, b) if out is None else out
    kernel = "grouped_gemm_f32_rows" if out.dtype == torch.float32 else "grouped_gemm"
    _run(kernel, tactic, operands, tile_size, {"c": out}, tile_idx_to_mn_limit, variant=_variant)
    return out


def grouped_gemm_swiglu(
    a: torch.Tensor,
    b: torch.Tensor,
    a_sf: torch.Tensor,
    b_sf: torch.Tensor,
    alpha: torch.Tensor,
    tile_idx_to_group_idx: torch.Tensor,
    num_non_exiting_tiles: torch.Tensor,
    global_sf: torch.Tensor,
    tile_size: int,
    *,
    tile_idx_to_mn_limit: torch.Tensor | None = None,
    tactic: Tactic = DEFAULT_TACTIC,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(c uint8 [m, n/4], c_sf uint8 [m * n / 32] swizzled): NVFP4(linear * silu(gate))."""
    c, c_sf = swiglu_outputs(a, b) if out is None else out
    epilogue = {"c": c, "c_sf": c_sf, "global_sf": global_sf.reshape(1)}
    operands = (a, b, a_sf, b_sf, alpha, tile_idx_to_group_idx, num_non_exiting_tiles)
    _run("grouped_gemm_swiglu", tactic, operands, tile_size, epilogue, tile_idx_to_mn_limit)
    return c, c_sf


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
    num_tokens: int,
    tile_size: int,
    *,
    tactic: Tactic = DEFAULT_TACTIC,
    out: torch.Tensor | None = None,
    out_zeroed: bool = False,
    _variant: str = "",
) -> torch.Tensor:
    """bf16 [num_tokens, n]: each valid row times its router weight, added into its token's row
    with atomics (the order of the adds varies run to run); the rows of tokens without a valid
    row are zero. Every element of ``out`` is overwritten, unless ``out_zeroed`` says the caller
    zeroed all of it: the kernel then only adds (no fill inside, no zeroing before)."""
    if out_zeroed and out is None:
        raise KernelArgumentError("out_zeroed=True says out is already zero: pass that out")
    out = finalize_outputs(a, b, num_tokens) if out is None else out
    epilogue = {"c": out, "p2e": permuted_idx_to_expanded_idx, "router": token_final_scales}
    epilogue |= _finalize_fill(tactic, out, out_zeroed)
    operands = (a, b, a_sf, b_sf, alpha, tile_idx_to_group_idx, num_non_exiting_tiles)
    top_k = token_final_scales.shape[1]
    _run(
        "grouped_gemm_finalize",
        tactic,
        operands,
        tile_size,
        epilogue,
        tile_idx_to_mn_limit,
        top_k=top_k,
        num_tokens=num_tokens,
        variant=_variant,
        zeroed_output=out_zeroed,
    )
    return out
