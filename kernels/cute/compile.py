"""Compiling and caching the CuTe kernels; compile-only (fake) arguments for AoT checks.

Compiled kernels are cached in memory by (kernel class, tactic, dtypes, compile-time constants),
and on disk (stagebot.kernels.cute.disk_cache) by that key, the kernel sources' digest and the
stagebot and CuTe DSL versions, so every pytest process of a stage, and every later run, loads
a kernel compiled once. Nothing here queries the device: the grid size is a launch argument.
``recording()`` collects the keys asked for, so a suite can compile them ahead next time
(stagebot.kernels.cute.warm); keys travel as JSON (``key_to_json``, ``key_from_json``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import shutil
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stagebot.kernels.cute import disk_cache
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
    # finalize only: the caller zeroed the output, so the kernel only adds (no fill, no wait)
    zeroed_output: bool = False


def key_to_json(key: CompileKey) -> dict:
    """``key`` as plain JSON values (key_from_json inverts it)."""
    return dataclasses.asdict(key)


def key_from_json(data: dict) -> CompileKey:
    """The key of ``key_to_json``'s output; ValueError, TypeError or KeyError if the fields
    are not this version's (a record written by another stagebot)."""
    if data["kernel"] not in DTYPES:
        raise ValueError(f"kernel {data['kernel']!r} is not one of {sorted(DTYPES)}")
    t = data["tactic"]
    tactic = Tactic(**{**t, "tile_mn": tuple(t["tile_mn"]), "cluster_mn": tuple(t["cluster_mn"])})
    return CompileKey(**{**data, "tactic": tactic, "dtypes": tuple(data["dtypes"])})


# Alignment the launcher guarantees for each pointer (TMA operands and vector stores: 16 bytes).
POINTER_ALIGNS = (16, 16, 16, 16, 4, 4, 4, 4, 16, 4, 4, 4, 4, 16)

_cache: dict[CompileKey, Any] = {}
# This process's compiles and disk-cache loads: counts ("compiled", "loaded") and seconds
# ("compiled_s", "loaded_s"), for the suite's summary.
stats: Counter = Counter()
_recorders: list[set[CompileKey]] = []
# The files whose content the compiled code depends on (their digest is part of the disk key).
KERNEL_SOURCES = (
    "grouped_gemm.py", "decode_gemm.py", "rs_gemm.py", "sm100_gemm.py", "epilogues.py", "ptx.py",
    "finalize_fill.py", "tactics.py", "compile.py", "compiled_io.py",
)  # fmt: skip


def kernel_class(tactic: Tactic):
    """The kernel class that runs ``tactic``: for swap_ab tactics the RS kernel with the tokens
    in fp16, else the decode kernel; the sm_100a kernel for blockscaled tactics; the WGMMA
    kernel for the others."""
    if tactic.blockscaled:
        from stagebot.kernels.cute.sm100_gemm import Nvfp4BlockScaledGemmSm100

        return Nvfp4BlockScaledGemmSm100
    if tactic.swap_ab and tactic.fp16_operand:
        from stagebot.kernels.cute.rs_gemm import Nvfp4RsGemmSm90

        return Nvfp4RsGemmSm90
    if tactic.swap_ab:
        from stagebot.kernels.cute.decode_gemm import Nvfp4DecodeGemmSm90

        return Nvfp4DecodeGemmSm90
    from stagebot.kernels.cute.grouped_gemm import Nvfp4GroupedGemmSm90

    return Nvfp4GroupedGemmSm90


def store_dtype(kernel: str):
    import cutlass

    return cutlass.Float32 if DTYPES[kernel][2] == "float32" else cutlass.BFloat16


def pointer_dtypes(kernel: str, tactic: Tactic):
    """cutlass dtypes of the kernel's pointer arguments, in order (see GroupedGemmCall): a
    tactic's fp16 operand comes as fp16 values, the other as packed NVFP4 bytes."""
    import cutlass

    c = cutlass.Uint32 if KERNEL_EPILOGUE[kernel] == "swiglu" else store_dtype(kernel)
    i32, f32, u8 = cutlass.Int32, cutlass.Float32, cutlass.Uint8
    a, b = (cutlass.Float16 if tactic.fp16_operand == x else u8 for x in "ab")
    return (a, b, i32, i32, f32, i32, i32, i32, c, u8, f32, i32, f32, i32)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def _sources_digest() -> str:
    h = hashlib.sha256()
    for name in KERNEL_SOURCES:
        h.update((Path(__file__).parent / name).read_bytes())
    return h.hexdigest()


def disk_entry_name(key: CompileKey) -> str:
    """The disk cache's name for ``key``: a different kernel source or version, another name."""
    return disk_cache.entry_name(
        (
            repr(key),
            _sources_digest(),
            f"stagebot {_version('stagebot')}",
            f"nvidia-cutlass-dsl {_version('nvidia-cutlass-dsl')}",
        )
    )


@contextmanager
def recording() -> Iterator[set[CompileKey]]:
    """The keys compile_kernel is asked for inside the block, compiled or not."""
    keys: set[CompileKey] = set()
    _recorders.append(keys)
    try:
        yield keys
    finally:
        _recorders.pop()  # blocks nest; a set-equal outer recorder must not be the one removed


def disk_entry_exists(folder: Path, key: CompileKey) -> bool:
    return disk_cache.DiskCache(folder).path(disk_entry_name(key)).exists()


def compile_kernel(key: CompileKey, *, keep_ptx: bool = False) -> Any:
    """Compiles (once per key, in memory and in the disk cache) with placeholder pointers; m is
    a runtime argument. ``keep_ptx`` always compiles (the PTX is not stored)."""
    for keys in _recorders:
        keys.add(key)
    if key in _cache and not keep_ptx:
        return _cache[key]
    folder = None if keep_ptx else disk_cache.default_dir()
    if folder is None:
        compiled = _timed_compile(key, keep_ptx)
    else:
        from stagebot.kernels.cute import compiled_io

        start = time.perf_counter()
        try:
            compiled, loaded = disk_cache.DiskCache(folder).get_or_build(
                disk_entry_name(key),
                functools.partial(_load, kernel_class(key.tactic)),
                lambda: (c := _timed_compile(key, False), compiled_io.dumps(c)),
            )
        except OSError as error:  # e.g. a read-only home: the cache is an optimisation
            warnings.warn(
                f"the cute kernel cache {folder} is unusable ({error}); compiling", stacklevel=2
            )
            compiled, loaded = _timed_compile(key, False), False
        if loaded:
            stats["loaded"] += 1
            stats["loaded_s"] += time.perf_counter() - start
    _cache[key] = compiled
    return compiled


def _load(kernel_cls: type, payload: bytes) -> Any:
    from stagebot.kernels.cute import compiled_io

    return compiled_io.loads(payload, kernel_cls.__call__)


def _timed_compile(key: CompileKey, keep_ptx: bool) -> Any:
    start = time.perf_counter()
    compiled = _compile(key, keep_ptx)
    stats["compiled"] += 1
    stats["compiled_s"] += time.perf_counter() - start
    return compiled


def _compile(key: CompileKey, keep_ptx: bool) -> Any:
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_ptr

    kernel = kernel_class(key.tactic)(
        key.tactic,
        KERNEL_EPILOGUE[key.kernel],
        key.mn_limit,
        key.variant,
        store_dtype(key.kernel),
        zeroed_output=key.zeroed_output,
    )
    gmem = cute.AddressSpace.gmem
    pointers = [
        make_ptr(dtype, 0, gmem, assumed_align=align)
        for dtype, align in zip(pointer_dtypes(key.kernel, key.tactic), POINTER_ALIGNS, strict=True)
    ]
    args = (
        *pointers,
        cutlass.Int32(key.tile_size),
        cutlass.Int32(1),
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
        with _no_host_engine(key.arch) if keep_ptx else nullcontext():
            compiled = cute.compile(kernel, *args, options=options)
    finally:
        if keep_ptx:
            shutil.rmtree(scratch, ignore_errors=True)
    return compiled


@contextmanager
def _no_host_engine(arch: str) -> Iterator[None]:
    """An ahead-of-time build wants the PTX only. CuTe DSL also builds the host engine (which
    initialises the CUDA driver) when the target is the arch it detected at start, and on a
    machine without a GPU it assumes sm_100a: so while building for that arch it is told
    another one (its private singleton's setting, CuTe DSL 4.3.5)."""
    from cutlass.cutlass_dsl import CuTeDSL

    envar = CuTeDSL._get_dsl().envar
    detected = envar.arch
    envar.arch = "none" if detected == arch else detected
    try:
        yield
    finally:
        envar.arch = detected
