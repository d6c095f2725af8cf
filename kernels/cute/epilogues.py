"""Epilogues of the grouped GEMM: what each thread does with its accumulators after the K loop.

Each thread holds, for its two rows (r2 = 0, 1: 8 rows apart) and every 8-column chunk j of the
CTA tile, two neighbouring columns (c2 = 0, 1); the flat register index is c2 + 2 r2 + 4 j and
``tCcC`` maps it to the (row, column) of the tile. The four threads of a quad (lane % 4) share a
row and hold columns 2q, 2q + 1 of every chunk.
"""

import cutlass
import cutlass.cute as cute

from stagebot.kernels.cute.ptx import (
    e2m1x2_byte,
    nvfp4_block_scale,
    red_add_bf16x2,
    red_add_bf16x8,
    red_add_bf16x8_bits,
)

SWIGLU_GROUP = 64  # columns of linear, then of gate, alternating in the GEMM1 output
SF_BLOCK = 16
SF_CHUNK_BYTES = 512  # one 128-row x 4-column block of the swizzled scale layout
STAGED_ROWS = 32  # decode tiles with at most this many valid rows take swiglu_quantize_staged
STAGE_PAD = 4  # fp32 words after each staged row


def _abs(v):
    return cute.arch.fmax(v, -v)


def _quad_or(word):
    """Bitwise OR of ``word`` over the four threads of the quad."""
    word = word | cute.arch.shuffle_sync_bfly(word, offset=1)
    return word | cute.arch.shuffle_sync_bfly(word, offset=2)


def _silu_product(linear, gate):
    """linear * silu(gate) in the reference's fp32 order (both SwiGLU epilogues use it)."""
    return linear * (gate / (1.0 + cute.math.exp(-gate)))


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
                        values.append(_silu_product(linear, gate))
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
def swiglu_quantize_staged(
    acc: cute.Tensor,
    tCcC: cute.Tensor,
    scale: cutlass.Float32,
    global_sf: cutlass.Float32,
    row0: cutlass.Int32,
    valid: cutlass.Int32,
    n_tile: cutlass.Int32,
    bn: cutlass.Constexpr,
    stage: cute.Tensor,
    barrier,
    ct: cutlass.Int32,
    num_threads: cutlass.Constexpr,
    mCw: cute.Tensor,
    mCsf: cute.Tensor,
):
    """swiglu_quantize_store for a tile of at most STAGED_ROWS valid rows (decode).

    Those rows' accumulators all sit in the first two warps, where the quantising work, done in
    registers, would run on one or two warps while the rest wait. Here their owners write them
    (times ``scale``) into ``stage`` (fp32 [STAGED_ROWS, bn + pad] in shared memory), and every
    thread then quantises whole 16-value blocks, one (row, block) at a time: no shuffles, 16
    independent values per thread. Same fp32 operations in the same order as the register
    path, so the same bytes. ``barrier`` syncs the ``num_threads`` MMA threads. ``stage``
    aliases the B operand buffers: it is written after every thread waited for its WGMMAs (the
    opening barrier), and the next tile's dequantisation overwrites it only after the closing
    one.
    """
    barrier.arrive_and_wait()
    for r2 in cutlass.range_constexpr(2):
        if tCcC[2 * r2][0] < valid:
            for j in cutlass.range_constexpr(cute.size(acc) // 4):
                for c2 in cutlass.range_constexpr(2):
                    i = c2 + 2 * r2 + 4 * j
                    stage[tCcC[i]] = acc[i] * scale
    barrier.arrive_and_wait()
    swiglu_quantize_rows(stage, global_sf, row0, valid, n_tile, bn, ct, num_threads, mCw, mCsf)
    barrier.arrive_and_wait()


@cute.jit
def swiglu_quantize_rows(
    stage: cute.Tensor,
    global_sf: cutlass.Float32,
    row0: cutlass.Int32,
    valid: cutlass.Int32,
    n_tile: cutlass.Int32,
    bn: cutlass.Constexpr,
    first: cutlass.Int32,
    step: cutlass.Constexpr,
    mCw: cute.Tensor,
    mCsf: cute.Tensor,
):
    """SwiGLU and NVFP4 quantisation of ``valid`` staged rows (fp32 [rows, bn], already times
    alpha): thread ``first`` takes (row, block) items first, first + step, ... (no barrier)."""
    blocks = bn // 32  # 16-value output blocks per row: bn / 2 outputs
    sf_col_groups = mCw.shape[1] // 8
    for item in cutlass.range(first, valid * blocks, step, unroll=1):
        r = item // blocks
        block = item % blocks
        # Output block b is linear columns 128 (b // 4) + 16 (b % 4) + [0, 16), gate 64 later.
        chunk = (block // 4) * 8 + block % 4  # in 16-column chunks of the tile
        linear = cute.make_rmem_tensor((1, SF_BLOCK), cutlass.Float32)
        gate = cute.make_rmem_tensor((1, SF_BLOCK), cutlass.Float32)
        cute.autovec_copy(cute.local_tile(stage, (1, SF_BLOCK), (r, chunk)), linear)
        cute.autovec_copy(cute.local_tile(stage, (1, SF_BLOCK), (r, chunk + 4)), gate)
        values = [_silu_product(linear[0, i], gate[0, i]) for i in range(SF_BLOCK)]
        vmax = _abs(values[0])
        for i in cutlass.range_constexpr(1, SF_BLOCK):
            vmax = cute.arch.fmax(vmax, _abs(values[i]))
        sf_byte, out_scale = nvfp4_block_scale(vmax, global_sf)
        words = [cutlass.Uint32(0), cutlass.Uint32(0)]
        for p in cutlass.range_constexpr(SF_BLOCK // 2):
            code = e2m1x2_byte(values[2 * p] * out_scale, values[2 * p + 1] * out_scale)
            words[p // 4] = words[p // 4] | (code << cutlass.Uint32(8 * (p % 4)))
        row = row0 + r
        sf_col = n_tile * blocks + block
        mCw[row, 2 * sf_col] = words[0]
        mCw[row, 2 * sf_col + 1] = words[1]
        mCsf[swizzled_sf_offset(row, sf_col, sf_col_groups)] = cutlass.Uint8(sf_byte)


def _token_row(expanded, mRouter, scale, top_k, out_address, row_bytes):
    """(router weight * scale, byte address of out[token, 0]) of a valid row whose expanded
    index is ``expanded``: its token is expanded // top_k."""
    token = cutlass.Int64(expanded // top_k)
    return mRouter[expanded] * scale, out_address + token * row_bytes


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
            weight, row_address = _token_row(
                expanded, mRouter, scale, top_k, out_address, row_bytes
            )
            for j in cutlass.range_constexpr(num_chunks):
                col = cutlass.Int64(col0 + tCcC[2 * r2 + 4 * j][1])
                red_add_bf16x2(
                    row_address + col * 2,
                    acc[2 * r2 + 4 * j] * weight,
                    acc[1 + 2 * r2 + 4 * j] * weight,
                )


@cute.jit
def finalize_rows(
    stage: cute.Tensor,
    rows: cute.Tensor,
    valid: cutlass.Int32,
    col0: cutlass.Int32,
    out_address: cutlass.Int64,
    row_bytes: cutlass.Int64,
    first: cutlass.Int32,
    step: cutlass.Constexpr,
    rounded: cutlass.Constexpr = False,
):
    """finalize_scatter_add for ``valid`` staged rows: thread ``first`` takes (row, 8-column
    chunk) items first, first + step, ..., one vector atomic each. ``stage`` is fp32 [rows,
    cols] accumulators, not yet times alpha, multiplied here by the row's router weight * scale
    (the same fp32 products as the register path), or, ``rounded``, uint32 [rows, cols / 2]:
    rows already multiplied and rounded to bf16 pairs (the RS kernel's drain build), added as
    they are.
    ``rows`` (fp32 [rows, 2], staged beside them) holds each row's router weight * scale and its
    token (-1: not a valid row), so that no item waits on a global load. The output's rows and
    col0 keep the chunks 16-byte aligned."""
    width = 4 if rounded else 8  # stage elements per 8-column chunk
    assert cute.size(stage, mode=[1]) % width == 0, "the staged columns come in 8-column chunks"
    chunks = cute.size(stage, mode=[1]) // width
    for item in cutlass.range(first, valid * chunks, step, unroll=1):
        r = item // chunks
        chunk = item % chunks
        token = cutlass.Int32(rows[r, 1])
        if token >= 0:
            row_address = out_address + cutlass.Int64(token) * row_bytes
            col = cutlass.Int64(col0 + 8 * chunk)
            values = cute.make_rmem_tensor((1, width), stage.element_type)
            cute.autovec_copy(cute.local_tile(stage, (1, width), (r, chunk)), values)
            if cutlass.const_expr(rounded):
                red_add_bf16x8_bits(row_address + col * 2, [values[0, i] for i in range(4)])
            else:
                weight = rows[r, 0]
                red_add_bf16x8(row_address + col * 2, [values[0, i] * weight for i in range(8)])


@cute.jit
def store_rows(
    stage: cute.Tensor,
    row0: cutlass.Int32,
    valid: cutlass.Int32,
    col0: cutlass.Int32,
    mC: cute.Tensor,
    first: cutlass.Int32,
    step: cutlass.Constexpr,
):
    """``valid`` staged rows (fp32 [rows, cols], already times alpha) converted to mC's dtype
    and stored at rows row0.., columns col0..; 8 columns per item, vector stores."""
    chunks = cute.size(stage, mode=[1]) // 8
    for item in cutlass.range(first, valid * chunks, step, unroll=1):
        r = item // chunks
        chunk = item % chunks
        values = cute.make_rmem_tensor((1, 8), cutlass.Float32)
        cute.autovec_copy(cute.local_tile(stage, (1, 8), (r, chunk)), values)
        out = cute.make_rmem_tensor((1, 8), mC.element_type)
        out.store(values.load().to(mC.element_type))
        row_c = cute.local_tile(mC, (1, 8), (row0 + r, col0 // 8 + chunk))
        cute.autovec_copy(out, row_c)
