"""Triton elementwise kernels of the MoE layer (GPU paths; the tests also run the interpreter).

- ``swiglu_quantize``: GEMM1's bf16 output (linear and gate interleaved in 64-column groups)
  -> NVFP4(linear * silu(gate)), packed codes and 128x4-swizzled scales, in one launch: the
  elementwise step of the unfused composition the SwiGLU-fused GEMM is benchmarked against.
- ``nvfp4_operand``: NVFP4 (packed codes, 128x4-swizzled scales) -> fp16 in the scale of the CuTe
  kernels' dequantised operands, e2m1 * e4m3 * 2^-7, exact, and in the K order of the kernel
  that loads it: the WGMMA kernel's operand tiles (stagebot.kernels.cute.grouped_gemm), each
  8-value group as n0 n4 n1 n5 n2 n6 n3 n7, or the RS kernel's register fragments
  (stagebot.kernels.cute.rs_gemm). An operand the GEMM re-reads many times is dequantised once
  by it and loaded by TMA, not dequantised per tile.
- ``unpermute``: out[t] = sum over k, in order, of scale[t, k] * permuted[idx[t, k]] in fp32
  (idx -1 skips), bf16 or fp32 rows in, bf16 out, one launch, no atomics: bit-identical run to
  run. The cute backend's deterministic finalize runs it on fp32 rows; after a plain GEMM it is
  the unfused composition the finalize-fused GEMM is benchmarked against.

Both follow the reference's fp32 order of operations (stagebot.kernels.nvfp4,
stagebot.kernels.moe_tables.moe_unpermute): IEEE division, no FMA contraction, and on the GPU
libdevice's expf, as torch's silu uses. The bf16 and e4m3 conversions are integer arithmetic
(round to nearest even), so Triton's CPU interpreter (TRITON_INTERPRET=1 at import time), whose
float casts do not round to nearest even, runs the same code exactly; only its exp (numpy's) can
differ from torch's in the last bit.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from stagebot.kernels import layouts
from stagebot.kernels.errors import KernelArgumentError

# Tiles from a sweep on the H200 (swiglu_quantize at 2048 and 65536 rows of n = 4096;
# unpermute at 16 and 8192 tokens of n = 7168, bf16 and fp32 rows).
SWIGLU_BLOCK_M = 16  # rows per program; divides the 128-row scale tile
UNPERMUTE_BLOCK_T = 1  # tokens per program
UNPERMUTE_BLOCK_N = 1024  # columns per program
UNPERMUTE_WARPS = 2
OPERAND_BLOCK_R = 8  # rows per program of nvfp4_operand
OPERAND_BLOCK_W = 64  # 8-value groups per program (512 values)
# Programs of nvfp4_operand at most; each strides over the row blocks. The grid is not sized by
# the rows: a MoE's permuted buffer is sized for the worst case, and a program per row block of
# it (116k at the bench's T8192 GEMM1, 2048 rows valid) cost the tokens-in-fp16 tactic more
# than it saved (NOTES.md, eighth session).
OPERAND_PROGRAMS = 8192
# Within each 8-value group, output slot j holds value (j // 2) + 4 (j % 2): the pairs (n0, n4),
# (n1, n5), ... that the kernel's bit placement (ptx.e2m1x8_to_f16x8) produces from one word.
OPERAND_ORDERS = ("smem", "registers")  # nvfp4_operand's K orders (see its docstring)
OPERAND_SCALE_EXP = 7  # the bits hold value * 2^-14; the operands are value * sf * 2^-7
_GROUP = layouts.SWIGLU_GROUP_SIZE  # 64 output columns = 4 scale blocks = one swizzle column


@triton.jit
def _bf16_to_f32(bits16):
    """bf16 bits (int16) -> fp32, exactly."""
    return (bits16.to(tl.uint16).to(tl.uint32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _swizzled_sf_offset(row, col, tile_bytes):
    """Byte offset of scale (row, col) in the 128x4 swizzle that layouts.swizzle_sf lays out:
    (row // 128, col // 4, row % 32, (row % 128) // 32, col % 4); tile_bytes = 128 x columns."""
    return (
        (row // 128).to(tl.int64) * tile_bytes
        + (col // 4) * 512
        + (row % 32) * 16
        + (row % 128) // 32 * 4
        + col % 4
    )


@triton.jit
def _f32_to_bf16(x):
    """fp32 -> bf16 bits (int16), round to nearest even (as cvt.rn.bf16.f32; NaN not kept)."""
    bits = x.to(tl.uint32, bitcast=True)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).to(tl.uint16).to(tl.int16, bitcast=True)


@triton.jit
def _e4m3(v):
    """Finite fp32 in [0, 448] -> (e4m3 code, its fp32 value), round to nearest even."""
    bits = v.to(tl.uint32, bitcast=True)
    # Normal (>= 2^-6): round the mantissa to 3 bits; a carry moves into the exponent.
    rounded = bits + 0x7FFFF + ((bits >> 20) & 1)
    normal_code = (rounded >> 20) - (120 << 3)  # fp32 exponent bias 127, e4m3 bias 7
    normal_value = (rounded & 0xFFF00000).to(tl.float32, bitcast=True)
    # Subnormal (< 2^-6): multiples of 2^-9; adding 2^23 rounds v * 512 to an integer.
    steps = (v * 512.0 + 8388608.0) - 8388608.0
    is_normal = v >= 0.015625
    code = tl.where(is_normal, normal_code, steps.to(tl.uint32))
    return code, tl.where(is_normal, normal_value, steps * 0.001953125)


@triton.jit
def _bf16_pair(w):
    """int32 holding bf16 elements 2i (low half) and 2i+1 (high half) -> two fp32 values."""
    even = (w << 16).to(tl.float32, bitcast=True)
    odd = (w & -65536).to(tl.float32, bitcast=True)
    return even, odd


@triton.jit
def _swiglu(linear, gate, PRECISE_EXP: tl.constexpr):
    """linear * silu(gate) in fp32, silu(g) = g / (1 + exp(-g)) as torch computes it."""
    if PRECISE_EXP:
        e = libdevice.exp(-gate)
    else:
        e = tl.exp(-gate)
    return linear * tl.math.div_rn(gate, 1.0 + e)


@triton.jit
def _e2m1(v):
    """Scaled fp32 -> e2m1 code (sign in bit 3), round to nearest even, saturating at 6."""
    a = tl.abs(v)
    code = (a > 0.25).to(tl.uint32) + (a >= 0.75).to(tl.uint32) + (a > 1.25).to(tl.uint32)
    code += (a >= 1.75).to(tl.uint32) + (a > 2.5).to(tl.uint32) + (a >= 3.5).to(tl.uint32)
    code += (a > 5.0).to(tl.uint32)
    return code | ((v.to(tl.uint32, bitcast=True) >> 31) << 3)


@triton.jit
def _swiglu_quantize_kernel(
    y_ptr,  # int32 view of bf16 [m, n]: element pairs
    gs_ptr,  # fp32 [1]
    out_ptr,  # uint8 [m, n / 4]
    sf_ptr,  # uint8 [swizzled_sf_size(m, n / 32)]
    m,
    y_row,  # n / 2: int32 pairs per input row
    out_row,  # n / 4: bytes per output row
    sf_tile,  # 4 * n: bytes per 128-row scale tile (128 rows x n / 32 scales)
    BLOCK_M: tl.constexpr,
    GROUPS: tl.constexpr,  # 64-column output groups per program (1 or 2)
    PRECISE_EXP: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    groups = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    r = rows[:, None, None, None]
    g = groups[None, :, None, None]
    block = tl.arange(0, 4)[None, None, :, None]
    pair = tl.arange(0, 8)[None, None, None, :]
    # Input group g: pairs of linear at [64g, 64g + 32), pairs of gate at [64g + 32, 64g + 64).
    lin_off = y_row * r.to(tl.int64) + g * 64 + block * 8 + pair
    valid = r < m
    lin_even, lin_odd = _bf16_pair(tl.load(y_ptr + lin_off, mask=valid, other=0))
    gate_even, gate_odd = _bf16_pair(tl.load(y_ptr + lin_off + 32, mask=valid, other=0))
    even = _swiglu(lin_even, gate_even, PRECISE_EXP)
    odd = _swiglu(lin_odd, gate_odd, PRECISE_EXP)

    gs = tl.load(gs_ptr)
    inv_gs = tl.math.div_rn(1.0, gs)
    vmax = tl.maximum(tl.max(tl.abs(even), axis=3), tl.max(tl.abs(odd), axis=3))
    sf, sf_value = _e4m3(tl.minimum(gs * (vmax * 0.16666666666666666), 448.0))
    is_zero = sf_value == 0.0
    out_scale = tl.where(
        is_zero, 0.0, tl.math.div_rn(1.0, tl.where(is_zero, 1.0, sf_value * inv_gs))
    )
    out_scale = out_scale[:, :, :, None]
    packed = _e2m1(even * out_scale) | (_e2m1(odd * out_scale) << 4)
    out_off = out_row * r.to(tl.int64) + g * 32 + block * 8 + pair
    tl.store(out_ptr + out_off, packed.to(tl.uint8), mask=valid)

    sf_col = groups[None, :, None] * 4 + tl.arange(0, 4)[None, None, :]
    sf_off = _swizzled_sf_offset(rows[:, None, None], sf_col, sf_tile)
    tl.store(sf_ptr + sf_off, sf.to(tl.uint8))  # rows m..Mp write zero padding


@triton.jit
def _e4m3_value(byte):
    """e4m3 bits (sign ignored: scales are positive) -> fp32, exactly."""
    exp = (byte >> 3) & 15
    man = byte & 7
    normal = (((exp + 120) << 23) | (man << 20)).to(tl.float32, bitcast=True)
    return tl.where(exp == 0, man.to(tl.float32) * 0.001953125, normal)  # subnormal: man * 2^-9


@triton.jit
def _operand_half(code, scale):
    """One e2m1 code (sign in bit 3) times ``scale`` -> fp16 bits in a uint32. The code's bits
    placed at fp16 bits 9..11 and 15 make the value * 2^-14 exactly (code 8 is -0.0), as the
    kernel's bit placement does; the product has at most 6 significant bits, so it is exact."""
    bits = ((code & 7) << 9) | ((code & 8) << 12)
    value = bits.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * scale
    return value.to(tl.float16).to(tl.uint16, bitcast=True).to(tl.uint32)


@triton.jit
def _operand_pair(words, p: tl.constexpr, scale):
    """Output word ``p`` of each 8-value group: values p (low half) and p + 4 (high half)."""
    low = _operand_half((words >> (4 * p)) & 15, scale)
    return low | (_operand_half((words >> (4 * p + 16)) & 15, scale) << 16)


@triton.jit
def _nvfp4_operand_kernel(
    words_ptr,  # uint32 [rows, k / 8]: one 8-value group per word, value i in nibble i
    sf_ptr,  # uint8 [swizzled_sf_size(rows, k / 16)]
    out_ptr,  # uint32 [rows, k / 2]: two fp16 per word
    tiles_ptr,  # int32 [1]: valid tiles of tile_size rows (read if LIMITED)
    rows,
    k,
    tile_size,
    BLOCK_R: tl.constexpr,
    BLOCK_W: tl.constexpr,
    SCALE_EXP: tl.constexpr,
    LIMITED: tl.constexpr,
    REGISTER_ORDER: tl.constexpr,
):
    if LIMITED:
        rows = tl.minimum(rows, tl.load(tiles_ptr) * tile_size)
    w = (tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W))[None, :]
    block = w // 2  # the scale column: 16 values, two words
    slot = (tl.program_id(1) * 4 * BLOCK_W + tl.arange(0, 4 * BLOCK_W))[None, :]
    first_row = tl.program_id(0) * BLOCK_R
    while first_row < rows:  # not range(): the interpreter cannot index by program_id
        r = (first_row + tl.arange(0, BLOCK_R))[:, None]
        valid = (r < rows) & (w < k // 8)
        words = tl.load(words_ptr + r.to(tl.int64) * (k // 8) + w, mask=valid, other=0)
        sf_off = _swizzled_sf_offset(r, block, 8 * k)  # 128 rows x k / 16 scales per row tile
        sf = _e4m3_value(tl.load(sf_ptr + sf_off, mask=valid, other=0).to(tl.uint32))
        scale = sf * (1 << SCALE_EXP)  # value * 2^-14 * sf * 2^7 = value * sf * 2^-7
        p0, p1 = _operand_pair(words, 0, scale), _operand_pair(words, 1, scale)
        p2, p3 = _operand_pair(words, 2, scale), _operand_pair(words, 3, scale)
        row_out = out_ptr + r.to(tl.int64) * (k // 2)
        if REGISTER_ORDER:
            # Word w of a 64-value block (w % 8 = 2 q + h) puts its pair s at output word
            # 8 s + 4 h + q of that block.
            first = (w - w % 8) * 4 + 4 * (w % 2) + (w % 8) // 2
            tl.store(row_out + first, p0, mask=valid)
            tl.store(row_out + first + 8, p1, mask=valid)
            tl.store(row_out + first + 16, p2, mask=valid)
            tl.store(row_out + first + 24, p3, mask=valid)
        else:
            out = tl.interleave(tl.interleave(p0, p2), tl.interleave(p1, p3))  # p0 p1 p2 p3
            tl.store(row_out + slot, out, mask=(r < rows) & (slot < k // 2))
        first_row += tl.num_programs(0) * BLOCK_R


@triton.jit
def _unpermute_kernel(
    src_ptr,
    idx_ptr,
    scale_ptr,
    out_ptr,
    num_tokens,
    n,
    src_stride,
    idx_stride_t,
    idx_stride_k,
    scale_stride_t,
    scale_stride_k,
    TOP_K: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SRC_F32: tl.constexpr,  # fp32 rows, else bf16 bits (int16)
):
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    token_ok = tokens < num_tokens
    col_ok = cols[None, :] < n
    tokens = tokens.to(tl.int64)
    acc = tl.zeros([BLOCK_T, BLOCK_N], dtype=tl.float32)
    for k in tl.static_range(TOP_K):
        row = tl.load(idx_ptr + tokens * idx_stride_t + k * idx_stride_k, mask=token_ok, other=-1)
        scale = tl.load(scale_ptr + tokens * scale_stride_t + k * scale_stride_k, mask=token_ok)
        taken = (row >= 0)[:, None]
        src = src_ptr + row.to(tl.int64)[:, None] * src_stride + cols[None, :]
        x = tl.load(src, mask=taken & col_ok, other=0)
        if not SRC_F32:
            x = _bf16_to_f32(x)
        acc += tl.where(taken, scale[:, None] * x, 0.0)
    out = out_ptr + tokens[:, None] * n + cols[None, :]
    tl.store(out, _f32_to_bf16(acc), mask=token_ok[:, None] & col_ok)


def _precise_exp() -> bool:
    """libdevice's exp when compiled for the GPU; the interpreter cannot call libdevice."""
    return isinstance(_swiglu_quantize_kernel, triton.runtime.JITFunction)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise KernelArgumentError(message)


def swiglu_quantize(y: torch.Tensor, global_sf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 y [m, n] (64-column linear/gate groups) -> (packed uint8 [m, n/4], swizzled scales).

    The scales are uint8 [swizzled_sf_size(m, n/32)], padding rows zero; global_sf is fp32 [1].
    """
    _require(
        y.dtype == torch.bfloat16 and y.dim() == 2 and y.is_contiguous(),
        f"argument `y` is {y.dtype} {tuple(y.shape)}; it must be contiguous bf16 [m, n]",
    )
    m, n = y.shape
    _require(n % (2 * _GROUP) == 0, f"argument `y` has n = {n}; it must be a multiple of 128")
    _require(
        global_sf.dtype == torch.float32 and global_sf.numel() == 1,
        "argument `global_sf` must be one fp32 value",
    )
    _require(
        global_sf.device == y.device,
        f"argument `global_sf` is on {global_sf.device}; it must be on y's device ({y.device})",
    )
    out = torch.empty(m, n // 4, dtype=torch.uint8, device=y.device)
    sf = torch.empty(layouts.swizzled_sf_size(m, n // 32), dtype=torch.uint8, device=y.device)
    if m == 0:
        return out, sf
    groups = n // (2 * _GROUP)
    per_program = 2 if groups % 2 == 0 else 1
    padded_rows = sf.numel() // (n // 32)
    grid = (padded_rows // SWIGLU_BLOCK_M, groups // per_program)
    _swiglu_quantize_kernel[grid](
        y.view(torch.int32),
        global_sf,
        out,
        sf,
        m,
        n // 2,
        n // 4,
        4 * n,
        BLOCK_M=SWIGLU_BLOCK_M,
        GROUPS=per_program,
        PRECISE_EXP=_precise_exp(),
        num_warps=4,
        enable_fp_fusion=False,
    )
    return out, sf


def nvfp4_operand(
    packed: torch.Tensor,
    sf: torch.Tensor,
    valid_tiles: torch.Tensor | None = None,
    tile_size: int = 128,
    order: str = "smem",
) -> torch.Tensor:
    """NVFP4 [rows, k / 2] codes and their swizzled scales -> fp16 [rows, k], as the CuTe
    kernel dequantises an operand (see the module docstring). rows: a multiple of 128 (whole
    scale tiles, so experts' matrices may be stacked); k: a multiple of 64. With
    ``valid_tiles`` (int32 [1] on the device, the GEMM's num_non_exiting_tiles) only the first
    valid_tiles x tile_size rows are written: a MoE's permuted buffer is sized for the worst
    case, and the rows past its tiles are never read.

    ``order`` is the K order of the values: "smem", the WGMMA kernel's (each 8-value group as
    n0 n4 n1 n5 n2 n6 n3 n7), or "registers", the order in which the RS kernel
    (stagebot.kernels.cute.rs_gemm) places the other operand in its register fragments:
    output position 16 s + 8 h + 2 q + j of each 64-value block holds value
    16 q + 8 h + s + 4 j."""
    _require(
        order in OPERAND_ORDERS,
        f"argument `order` is {order!r}; it must be one of {OPERAND_ORDERS}",
    )
    _require(
        packed.dtype == torch.uint8 and packed.dim() == 2 and packed.is_contiguous(),
        f"argument `packed` is {packed.dtype} {tuple(packed.shape)}; it must be contiguous "
        "uint8 [rows, k / 2]",
    )
    rows, k = packed.shape[0], 2 * packed.shape[1]
    _require(
        rows % 128 == 0 and k % 64 == 0,
        f"argument `packed` is [{rows}, {k // 2}]; rows must be a multiple of 128 and k of 64",
    )
    _require(
        sf.dtype == torch.uint8 and sf.numel() == layouts.swizzled_sf_size(rows, k // 16),
        f"argument `sf` has {sf.numel()} {sf.dtype} scales; it must hold "
        f"{layouts.swizzled_sf_size(rows, k // 16)} uint8 (rows x k / 16, swizzled)",
    )
    _require(
        sf.device == packed.device,
        f"argument `sf` is on {sf.device} and `packed` on {packed.device}; both must be on one",
    )
    if valid_tiles is not None:
        _require(
            valid_tiles.dtype == torch.int32 and valid_tiles.numel() == 1,
            f"argument `valid_tiles` is {valid_tiles.dtype} {tuple(valid_tiles.shape)}; it must "
            "be int32 [1]",
        )
        _require(
            valid_tiles.device == packed.device,
            f"argument `valid_tiles` is on {valid_tiles.device}; it must be on `packed`'s "
            f"device ({packed.device})",
        )
    out = torch.empty(rows, k, dtype=torch.float16, device=packed.device)
    word_blocks = triton.cdiv(k // 8, OPERAND_BLOCK_W)
    grid = (max(1, min(rows // OPERAND_BLOCK_R, OPERAND_PROGRAMS // word_blocks)), word_blocks)
    _nvfp4_operand_kernel[grid](
        packed.view(torch.int32), sf.reshape(-1), out.view(torch.int32),
        sf if valid_tiles is None else valid_tiles, rows, k, tile_size,
        BLOCK_R=OPERAND_BLOCK_R, BLOCK_W=OPERAND_BLOCK_W, SCALE_EXP=OPERAND_SCALE_EXP,
        LIMITED=valid_tiles is not None, REGISTER_ORDER=order == "registers", num_warps=4,
    )  # fmt: skip
    return out


def unpermute(
    permuted: torch.Tensor,
    expanded_idx_to_permuted_idx: torch.Tensor,
    token_final_scales: torch.Tensor,
) -> torch.Tensor:
    """bf16 out [T, n] = sum over k of [idx >= 0] * scale[t, k] * permuted[idx[t, k]], in fp32.

    ``permuted`` is bf16 or fp32 [m, n] (rows dense); the fp32 sum is rounded to bf16 once.
    """
    idx, scales = expanded_idx_to_permuted_idx, token_final_scales
    src_f32 = permuted.dtype == torch.float32
    _require(
        permuted.dtype in (torch.bfloat16, torch.float32)
        and permuted.dim() == 2
        and permuted.stride(1) == 1,
        f"argument `permuted` is {permuted.dtype} {tuple(permuted.shape)}; "
        "it must be bf16 or fp32 [m, n] with dense rows",
    )
    _require(
        idx.dtype == torch.int32 and idx.dim() == 2,
        f"argument `expanded_idx_to_permuted_idx` is {idx.dtype} {tuple(idx.shape)}; "
        "it must be int32 [T, top_k]",
    )
    _require(
        scales.dtype == torch.float32 and scales.shape == idx.shape,
        f"argument `token_final_scales` is {scales.dtype} {tuple(scales.shape)}; "
        f"it must be fp32 {tuple(idx.shape)}",
    )
    num_tokens, top_k = idx.shape
    n = permuted.shape[1]
    out = torch.empty(num_tokens, n, dtype=torch.bfloat16, device=permuted.device)
    if num_tokens == 0 or n == 0:
        return out
    grid = (triton.cdiv(num_tokens, UNPERMUTE_BLOCK_T), triton.cdiv(n, UNPERMUTE_BLOCK_N))
    _unpermute_kernel[grid](
        permuted if src_f32 else permuted.view(torch.int16),
        idx,
        scales,
        out.view(torch.int16),
        num_tokens,
        n,
        permuted.stride(0),
        *idx.stride(),
        *scales.stride(),
        TOP_K=top_k,
        BLOCK_T=UNPERMUTE_BLOCK_T,
        BLOCK_N=UNPERMUTE_BLOCK_N,
        SRC_F32=src_f32,
        num_warps=UNPERMUTE_WARPS,
        enable_fp_fusion=False,
    )
    return out
