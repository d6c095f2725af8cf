"""Epilogues of the grouped GEMM: what each thread does with its accumulators after the K loop.

Each thread holds, for its two rows (r2 = 0, 1: 8 rows apart) and every 8-column chunk j of the
CTA tile, two neighbouring columns (c2 = 0, 1); the flat register index is c2 + 2 r2 + 4 j and
``tCcC`` maps it to the (row, column) of the tile. The four threads of a quad (lane % 4) share a
row and hold columns 2q, 2q + 1 of every chunk.
"""

import cutlass
import cutlass.cute as cute

from stagebot.kernels.cute.ptx import e2m1x2_byte, nvfp4_block_scale, red_add_bf16x2

SWIGLU_GROUP = 64  # columns of linear, then of gate, alternating in the GEMM1 output
SF_BLOCK = 16
SF_CHUNK_BYTES = 512  # one 128-row x 4-column block of the swizzled scale layout


def _abs(v):
    return cute.arch.fmax(v, -v)


def _quad_or(word):
    """Bitwise OR of ``word`` over the four threads of the quad."""
    word = word | cute.arch.shuffle_sync_bfly(word, offset=1)
    return word | cute.arch.shuffle_sync_bfly(word, offset=2)


def _quad_max(value):
    value = cute.arch.fmax(value, cute.arch.shuffle_sync_bfly(value, offset=1))
    return cute.arch.fmax(value, cute.arch.shuffle_sync_bfly(value, offset=2))


def swizzled_sf_offset(row, col, sf_col_groups):
    """Byte offset of scale (row, col) in the 128x4-swizzled layout (stagebot.kernels.layouts)."""
    return (
        (row // 128) * sf_col_groups * SF_CHUNK_BYTES
        + (col // 4) * SF_CHUNK_BYTES
        + (row % 32) * 16
        + ((row % 128) // 32) * 4
        + col % 4
    )


@cute.jit
def swiglu_quantize_store(
    acc: cute.Tensor,
    tCcC: cute.Tensor,
    scale: cutlass.Float32,
    global_sf: cutlass.Float32,
    row0: cutlass.Int32,
    n_tile: cutlass.Int32,
    bn: cutlass.Constexpr,
    mCw: cute.Tensor,
    mCsf: cute.Tensor,
):
    """linear * silu(gate) of the tile, quantised to NVFP4 with ``global_sf`` and stored.

    Column 64 g + c of the output pairs linear column 128 g + c with gate column 128 g + 64 + c
    of the tile: chunk j + 8 of the same thread. A 16-value block is one row's chunks 2p, 2p + 1
    across the quad: its amax is a quad reduction; lane q's codes are bytes q and 4 + q of the
    block's 8 packed bytes, gathered by OR so lanes 0 and 1 store one 32-bit word each and lane 2
    stores the block's e4m3 scale. ``mCw`` is the packed output as uint32 words [m, n / 16],
    ``mCsf`` its swizzled scales (flat bytes).
    """
    q = cute.arch.lane_idx() % 4
    sf_col_groups = mCw.shape[1] // 8  # (n / 32 scale columns) / 4
    for r2 in cutlass.range_constexpr(2):
        row = row0 + tCcC[2 * r2][0]
        for group in cutlass.range_constexpr(bn // (2 * SWIGLU_GROUP)):
            for block in cutlass.range_constexpr(SWIGLU_GROUP // SF_BLOCK):
                values = []
                for half in cutlass.range_constexpr(2):
                    j = group * 16 + block * 2 + half
                    for c2 in cutlass.range_constexpr(2):
                        linear = acc[c2 + 2 * r2 + 4 * j] * scale
                        gate = acc[c2 + 2 * r2 + 4 * (j + 8)] * scale
                        values.append(linear * (gate / (1.0 + cute.math.exp(-gate))))
                vmax = cute.arch.fmax(
                    cute.arch.fmax(_abs(values[0]), _abs(values[1])),
                    cute.arch.fmax(_abs(values[2]), _abs(values[3])),
                )
                sf_byte, out_scale = nvfp4_block_scale(_quad_max(vmax), global_sf)
                shift = cutlass.Uint32(8 * q)
                low = e2m1x2_byte(values[0] * out_scale, values[1] * out_scale) << shift
                high = e2m1x2_byte(values[2] * out_scale, values[3] * out_scale) << shift
                low = _quad_or(low)
                high = _quad_or(high)
                sf_col = n_tile * (bn // 32) + group * 4 + block
                if q == 0:
                    mCw[row, 2 * sf_col] = low
                if q == 1:
                    mCw[row, 2 * sf_col + 1] = high
                if q == 2:
                    mCsf[swizzled_sf_offset(row, sf_col, sf_col_groups)] = cutlass.Uint8(sf_byte)


@cute.jit
def finalize_scatter_add(
    acc: cute.Tensor,
    tCcC: cute.Tensor,
    scale: cutlass.Float32,
    row0: cutlass.Int32,
    limit: cutlass.Int32,
    col0: cutlass.Int32,
    mP2e: cute.Tensor,
    mRouter: cute.Tensor,
    out_address: cutlass.Int64,
    row_bytes: cutlass.Int64,
    top_k: cutlass.Constexpr,
):
    """out[token, :] += router weight * scale * row, with bf16x2 atomics, for each valid row.

    A row is valid below the tile's mn_limit and with an expanded index >= 0; its token is
    expanded // top_k and its weight mRouter[expanded]. ``out_address`` is the byte address of
    out[0, 0] of the row-major bf16 [num_tokens, n] output, ``row_bytes`` its row pitch; col0
    is the tile's first column.
    """
    num_chunks = cute.size(acc) // 4
    for r2 in cutlass.range_constexpr(2):
        row = row0 + tCcC[2 * r2][0]
        expanded = cutlass.Int32(-1)
        if row < limit:
            expanded = mP2e[row]
        if expanded >= 0:
            weight = mRouter[expanded] * scale
            token = cutlass.Int64(expanded // top_k)
            row_address = out_address + token * row_bytes
            for j in cutlass.range_constexpr(num_chunks):
                col = cutlass.Int64(col0 + tCcC[2 * r2 + 4 * j][1])
                red_add_bf16x2(
                    row_address + col * 2,
                    acc[2 * r2 + 4 * j] * weight,
                    acc[1 + 2 * r2 + 4 * j] * weight,
                )
