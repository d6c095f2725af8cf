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

DTYPES = ("nvfp4", "nvfp4", "bfloat16")  # a, b, c: the only combination implemented


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
    variant: str = ""  # diagnostic builds only (gpu_check); "" is the kernel


_cache: dict[CompileKey, Any] = {}


def _kernel_class(name: str):
    from stagebot.kernels.cute import grouped_gemm

    return {"grouped_gemm": grouped_gemm.Nvfp4GroupedGemmSm90}[name]


def compile_kernel(key: CompileKey, *, keep_ptx: bool = False) -> Any:
    """Compiles (once per key) with placeholder pointers; m is a runtime argument."""
    if key in _cache and not keep_ptx:
        return _cache[key]
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_ptr

    kernel = _kernel_class(key.kernel)(key.tactic, key.variant)
    gmem = cute.AddressSpace.gmem
    args = (
        make_ptr(cutlass.Uint8, 0, gmem, assumed_align=16),
        make_ptr(cutlass.Uint8, 0, gmem, assumed_align=16),
        make_ptr(cutlass.Int32, 0, gmem, assumed_align=16),
        make_ptr(cutlass.Int32, 0, gmem, assumed_align=16),
        make_ptr(cutlass.Float32, 0, gmem, assumed_align=4),
        make_ptr(cutlass.Int32, 0, gmem, assumed_align=4),
        make_ptr(cutlass.Int32, 0, gmem, assumed_align=4),
        make_ptr(cutlass.BFloat16, 0, gmem, assumed_align=16),
        cutlass.Int32(key.tile_size),
        cutlass.Int32(1),
        key.n,
        key.k,
        key.num_experts,
        key.tile_size,
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
