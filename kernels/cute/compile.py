"""Compiling and caching the CuTe kernels; compile-only (fake) arguments for AoT checks.

Compiled kernels are cached in memory by (kernel class, tactic, dtypes, compile-time constants).
Nothing here queries the device: the grid size is an argument of the launch.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

from stagebot.kernels.cute.tactics import Tactic

# The kernel behind each op, and the (a, b, c) dtypes each implements (the only ones).
KERNEL_EPILOGUE = {
    "grouped_gemm": "store",
    "grouped_gemm_f32_rows": "store",  # fp32 rows for the deterministic finalize's gather-sum
    "grouped_gemm_swiglu": "swiglu",
    "grouped_gemm_finalize": "finalize",
}
DTYPES = {
    "grouped_gemm": ("nvfp4", "nvfp4", "bfloat16"),
    "grouped_gemm_f32_rows": ("nvfp4", "nvfp4", "float32"),
    "grouped_gemm_swiglu": ("nvfp4", "nvfp4", "nvfp4"),
    "grouped_gemm_finalize": ("nvfp4", "nvfp4", "bfloat16"),
}


@dataclass(frozen=True)
class CompileKey:
    kernel: str
    tactic: Tactic
    dtypes: tuple[str, ...]
    n: int
    k: int
    num_experts: int
    tile_size: int
    arch: str
    mn_limit: bool = False  # reads tile_idx_to_mn_limit (finalize always does)
    top_k: int = 1  # finalize only: expanded index // top_k is the token
    variant: str = ""  # diagnostic builds only (gpu_check); "" is the kernel


# Alignment the launcher guarantees for each pointer (TMA operands and vector stores: 16 bytes).
POINTER_ALIGNS = (16, 16, 16, 16, 4, 4, 4, 4, 16, 4, 4, 4, 4)

_cache: dict[CompileKey, Any] = {}


def store_dtype(kernel: str):
    import cutlass

    return cutlass.Float32 if DTYPES[kernel][2] == "float32" else cutlass.BFloat16


def pointer_dtypes(kernel: str):
    """cutlass dtypes of the kernel's pointer arguments, in order (see Nvfp4GroupedGemmSm90)."""
    import cutlass

    c = cutlass.Uint32 if KERNEL_EPILOGUE[kernel] == "swiglu" else store_dtype(kernel)
    i32, f32, u8 = cutlass.Int32, cutlass.Float32, cutlass.Uint8
    return (u8, u8, i32, i32, f32, i32, i32, i32, c, u8, f32, i32, f32)


def compile_kernel(key: CompileKey, *, keep_ptx: bool = False) -> Any:
    """Compiles (once per key) with placeholder pointers; m is a runtime argument."""
    if key in _cache and not keep_ptx:
        return _cache[key]
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_ptr

    from stagebot.kernels.cute.grouped_gemm import Nvfp4GroupedGemmSm90

    kernel = Nvfp4GroupedGemmSm90(
        key.tactic, KERNEL_EPILOGUE[key.kernel], key.mn_limit, key.variant, store_dtype(key.kernel)
    )
    gmem = cute.AddressSpace.gmem
    pointers = [
        make_ptr(dtype, 0, gmem, assumed_align=align)
        for dtype, align in zip(pointer_dtypes(key.kernel), POINTER_ALIGNS, strict=True)
    ]
    args = (
        *pointers,
        cutlass.Int32(key.tile_size),
        cutlass.Int32(1),
        key.n,
        key.k,
        key.num_experts,
        key.tile_size,
        key.top_k,
        make_fake_stream(),
    )
    options = f"--gpu-arch {key.arch}"
    if keep_ptx:  # the PTX is read from the compiled object; its file copy goes to a scratch folder
        scratch = tempfile.mkdtemp(prefix="stagebot-ptx-")
        options += f" --keep-ptx --dump-dir {scratch}"
    try:
        compiled = cute.compile(kernel, *args, options=options)
    finally:
        if keep_ptx:
            shutil.rmtree(scratch, ignore_errors=True)
    _cache[key] = compiled
    return compiled
