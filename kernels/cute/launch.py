"""Host launchers: torch tensors in, the compiled CuTe kernel run on the current stream.

Arguments are assumed already checked by stagebot.kernels.ops (shapes, dtypes, devices); what
only the kernel requires (a tactic that fits, alignment) is checked here and raises
KernelArgumentError.
"""

from __future__ import annotations

import functools

import torch

from stagebot.kernels.cute.compile import DTYPES, CompileKey, compile_kernel
from stagebot.kernels.cute.tactics import DEFAULT_TACTIC, Tactic
from stagebot.kernels.errors import KernelArgumentError

ARCH = "sm_90a"
TMA_ALIGN = 16


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _ptr(dtype, t: torch.Tensor, align: int):
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    return make_ptr(dtype, t.data_ptr(), cute.AddressSpace.gmem, assumed_align=align)


def problem_support(
    tactic: Tactic,
    a: torch.Tensor,
    b: torch.Tensor,
    a_sf: torch.Tensor,
    b_sf: torch.Tensor,
    tile_size: int,
) -> tuple[bool, str]:
    """(ok, reason): the tactic's predicates plus what the launcher needs of the tensors."""
    from stagebot.kernels.cute.grouped_gemm import Nvfp4GroupedGemmSm90

    _, n, half_k = b.shape
    ok, why = Nvfp4GroupedGemmSm90.can_implement(tactic, n, 2 * half_k, tile_size)
    if not ok:
        return ok, why
    for name, t in (("a", a), ("b", b), ("a_sf", a_sf), ("b_sf", b_sf)):
        if not t.is_contiguous() or t.data_ptr() % TMA_ALIGN:
            return False, f"{name} must be contiguous and {TMA_ALIGN}-byte aligned for TMA"
    return True, ""


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
    tactic: Tactic = DEFAULT_TACTIC,
    out: torch.Tensor | None = None,
    _variant: str = "",
) -> torch.Tensor:
    """bf16 [m, n]; rows of exiting tiles are left as they were in ``out`` (or uninitialised)."""
    import cuda.bindings.driver as cuda
    import cutlass

    ok, why = problem_support(tactic, a, b, a_sf, b_sf, tile_size)
    if not ok:
        raise KernelArgumentError(f"the cute grouped_gemm cannot take this call: {why}")
    m, half_k = a.shape
    experts, n, _ = b.shape
    key = CompileKey(
        "grouped_gemm", tactic, DTYPES, n, 2 * half_k, experts, tile_size, ARCH, _variant
    )
    compiled = compile_kernel(key)
    if out is None:
        out = torch.empty(m, n, dtype=torch.bfloat16, device=a.device)
    bm, bn = tactic.tile_mn
    grid = max(1, min(_sm_count(a.device.index or 0), (m // bm) * (n // bn)))
    stream = cuda.CUstream(torch.cuda.current_stream(a.device).cuda_stream)
    compiled(
        _ptr(cutlass.Uint8, a, TMA_ALIGN),
        _ptr(cutlass.Uint8, b, TMA_ALIGN),
        _ptr(cutlass.Int32, a_sf, TMA_ALIGN),
        _ptr(cutlass.Int32, b_sf, TMA_ALIGN),
        _ptr(cutlass.Float32, alpha, 4),
        _ptr(cutlass.Int32, tile_idx_to_group_idx, 4),
        _ptr(cutlass.Int32, num_non_exiting_tiles, 4),
        _ptr(cutlass.BFloat16, out, TMA_ALIGN),
        cutlass.Int32(m),
        cutlass.Int32(grid),
        stream,
    )
    return out
