"""Inline PTX the kernels need that CuTe DSL 4.3.5 does not wrap (sm_90a).

Dequantisation (operands): e2m1 codes and e4m3 scales rebuilt as fp16 bit patterns.
Quantisation (SwiGLU epilogue): the NVFP4 block scale and e2m1 codes in the fp32 order of
stagebot.kernels.nvfp4 (sm_90 has no e2m1 conversion instruction: codes come from the
round-to-nearest-even midpoints). Finalize epilogue: a packed bf16x2 global reduction; its
output fill (stagebot.kernels.cute.finalize_fill): gpu-scope atomics on int32 counters and
16-byte stores of zeros.
"""

import cutlass
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

ONE_SIXTH_F32 = "0f3E2AAAAB"  # fp32(1/6): the quantiser multiplies the block amax by it


@dsl_user_op
def e2m1x8_to_f16x8(word, scale2, *, loc=None, ip=None):
    """8 packed e2m1 (one uint32) times an f16x2 scale -> 4 f16x2 words.

    Output pairs (n0, n4), (n1, n5), (n2, n6), (n3, n7): a fixed permutation of the 8 K
    positions, the same for A and B, so the dot products are unchanged. Splitting the nibbles
    of the odd and even positions into separate words leaves 4-bit gaps, so one mask per
    output places sign (bit 15) and magnitude (bits 9-11) of each fp16 lane without carries:
    (x | x >> 3) & 0x8E008E00 for the lanes at bits 12-15 and 28-31, and the same masked with
    0x008E008E then shifted left by 8 for the lanes one byte lower (11 integer ops in all, each
    lop3 = (a | b) & c).
    """
    res = llvm.inline_asm(
        llvm.StructType.get_literal([T.i32(), T.i32(), T.i32(), T.i32()]),
        [
            cutlass.Uint32(word).ir_value(loc=loc, ip=ip),
            cutlass.Uint32(scale2).ir_value(loc=loc, ip=ip),
        ],
        """{
        .reg .b32 x, y, t, u;
        and.b32 x, $4, 0xF0F0F0F0;
        shl.b32 y, $4, 4;
        and.b32 y, y, 0xF0F0F0F0;
        shr.b32 t, x, 3;
        lop3.b32 u, x, t, 0x8E008E00, 0xA8;
        mul.rn.f16x2 $3, u, $5;
        lop3.b32 u, x, t, 0x008E008E, 0xA8;
        shl.b32 u, u, 8;
        mul.rn.f16x2 $1, u, $5;
        shr.b32 t, y, 3;
        lop3.b32 u, y, t, 0x8E008E00, 0xA8;
        mul.rn.f16x2 $2, u, $5;
        lop3.b32 u, y, t, 0x008E008E, 0xA8;
        shl.b32 u, u, 8;
        mul.rn.f16x2 $0, u, $5;
        }""",
        "=r,=r,=r,=r,r,r",
        loc=loc,
        ip=ip,
    )
    return [cutlass.Uint32(llvm.extractvalue(T.i32(), res, [i], loc=loc, ip=ip)) for i in range(4)]


@dsl_user_op
def e4m3_to_f16x2(byte_in_low_bits, *, loc=None, ip=None):
    """The e4m3 scale in bits 0-6 (bit 7, the sign, ignored) -> f16x2 (sf * 2^7, sf * 2^7)."""
    res = llvm.inline_asm(
        T.i32(),
        [cutlass.Uint32(byte_in_low_bits).ir_value(loc=loc, ip=ip)],
        """{
        .reg .b32 t, c;
        and.b32 t, $1, 0x7F;
        mul.lo.u32 t, t, 0x00800080;
        mov.b32 c, 0x78007800;
        mul.rn.f16x2 $0, t, c;
        }""",
        "=r,r",
        loc=loc,
        ip=ip,
    )
    return cutlass.Uint32(res)


@dsl_user_op
def nvfp4_block_scale(vmax, global_sf, *, loc=None, ip=None):
    """(e4m3 byte in bits 0-7, fp32 value multiplier) for a 16-value block of amax ``vmax``.

    sf = e4m3_satfinite(gs * (vmax * fp32(1/6))); out_scale = 1 / (float(sf) * (1 / gs)), 0 when
    sf is 0: every step rounded as the reference rounds it (rcp.rn is the IEEE reciprocal).
    """
    res = llvm.inline_asm(
        llvm.StructType.get_literal([T.i32(), T.f32()]),
        [
            cutlass.Float32(vmax).ir_value(loc=loc, ip=ip),
            cutlass.Float32(global_sf).ir_value(loc=loc, ip=ip),
        ],
        f"""{{
        .reg .f32 t, r, v;
        .reg .b16 h, z;
        .reg .b32 w;
        .reg .pred p;
        mul.rn.f32 t, $2, {ONE_SIXTH_F32};
        mul.rn.f32 t, $3, t;
        cvt.rn.satfinite.e4m3x2.f32 h, t, t;
        cvt.u32.u16 $0, h;
        and.b32 $0, $0, 0xFF;
        cvt.rn.f16x2.e4m3x2 w, h;
        mov.b32 {{z, h}}, w;
        cvt.f32.f16 v, z;
        rcp.rn.f32 r, $3;
        mul.rn.f32 r, v, r;
        rcp.rn.f32 r, r;
        setp.eq.f32 p, v, 0f00000000;
        selp.f32 $1, 0f00000000, r, p;
        }}""",
        "=r,=f,f,f",
        loc=loc,
        ip=ip,
    )
    byte = cutlass.Uint32(llvm.extractvalue(T.i32(), res, [0], loc=loc, ip=ip))
    return byte, cutlass.Float32(llvm.extractvalue(T.f32(), res, [1], loc=loc, ip=ip))


_E2M1_CODE_PTX = """
        abs.f32 a, {v};
        setp.gt.f32 p, a, 0f3E800000;
        selp.b32 c, 1, 0, p;
        setp.ge.f32 p, a, 0f3F400000;
        @p add.u32 c, c, 1;
        setp.gt.f32 p, a, 0f3FA00000;
        @p add.u32 c, c, 1;
        setp.ge.f32 p, a, 0f3FE00000;
        @p add.u32 c, c, 1;
        setp.gt.f32 p, a, 0f40200000;
        @p add.u32 c, c, 1;
        setp.ge.f32 p, a, 0f40600000;
        @p add.u32 c, c, 1;
        setp.gt.f32 p, a, 0f40A00000;
        @p add.u32 c, c, 1;
        mov.b32 s, {v};
        shr.u32 s, s, 28;
        and.b32 s, s, 8;
        or.b32 c, c, s;"""


@dsl_user_op
def e2m1x2_byte(v0, v1, *, loc=None, ip=None):
    """Two scaled fp32 values -> one byte of e2m1 codes (v0 in the low nibble).

    Round to nearest even on the e2m1 grid, saturating at 6: the code counts the midpoints
    below |v| (strict for midpoints below an odd code, inclusive below an even one); the sign
    bit is copied, so -0.0 keeps it, as in stagebot.kernels.nvfp4.e2m1_encode.
    """
    res = llvm.inline_asm(
        T.i32(),
        [
            cutlass.Float32(v0).ir_value(loc=loc, ip=ip),
            cutlass.Float32(v1).ir_value(loc=loc, ip=ip),
        ],
        "{\n .reg .f32 a;\n .reg .b32 c, s, lo;\n .reg .pred p;"
        + _E2M1_CODE_PTX.format(v="$1")
        + "\n mov.b32 lo, c;"
        + _E2M1_CODE_PTX.format(v="$2")
        + "\n shl.b32 c, c, 4;\n or.b32 $0, lo, c;\n}",
        "=r,f,f",
        loc=loc,
        ip=ip,
    )
    return cutlass.Uint32(res)


@dsl_user_op
def red_add_bf16x2(address, lo, hi, *, loc=None, ip=None):
    """Atomically adds bf16(lo), bf16(hi) to the two bf16 at global ``address`` (4-byte aligned)."""
    llvm.inline_asm(
        None,
        [
            cutlass.Int64(address).ir_value(loc=loc, ip=ip),
            cutlass.Float32(lo).ir_value(loc=loc, ip=ip),
            cutlass.Float32(hi).ir_value(loc=loc, ip=ip),
        ],
        """{
        .reg .b32 d;
        cvt.rn.bf16x2.f32 d, $2, $1;
        red.global.add.noftz.bf16x2 [$0], d;
        }""",
        "l,f,f",
        has_side_effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def red_add_bf16x8(address, values, *, loc=None, ip=None):
    """Atomically adds bf16(values[i]) to the 8 bf16 at global ``address`` (16-byte aligned):
    one vector reduction (sm_90), element for element the same adds as red_add_bf16x2."""
    llvm.inline_asm(
        None,
        [cutlass.Int64(address).ir_value(loc=loc, ip=ip)]
        + [cutlass.Float32(v).ir_value(loc=loc, ip=ip) for v in values],
        """{
        .reg .b32 d<4>;
        cvt.rn.bf16x2.f32 d0, $2, $1;
        cvt.rn.bf16x2.f32 d1, $4, $3;
        cvt.rn.bf16x2.f32 d2, $6, $5;
        cvt.rn.bf16x2.f32 d3, $8, $7;
        red.global.add.noftz.v4.bf16x2 [$0], {d0, d1, d2, d3};
        }""",
        "l,f,f,f,f,f,f,f,f",
        has_side_effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def red_add_bf16x8_bits(address, words, *, loc=None, ip=None):
    """red_add_bf16x8 of values already rounded to bf16: ``words`` are four bf16x2 words (the
    lower half the lower address), as cvt.rn.bf16x2.f32 makes them."""
    llvm.inline_asm(
        None,
        [cutlass.Int64(address).ir_value(loc=loc, ip=ip)]
        + [cutlass.Uint32(w).ir_value(loc=loc, ip=ip) for w in words],
        "red.global.add.noftz.v4.bf16x2 [$0], {$1, $2, $3, $4};",
        "l,r,r,r,r",
        has_side_effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def mma_f16_m16n8k16(a, b, c, *, loc=None, ip=None):
    """One warp's mma.sync m16n8k16, fp16 operands from registers, fp32 accumulators.

    ``a``: 4 f16x2 words (rows g and g + 8 of K pair slot 0, then of slot 1, g = lane // 4),
    ``b``: 2 f16x2 words (column g, slots 0 and 1), ``c``: 4 fp32 (row g columns 2q, 2q + 1,
    then row g + 8), q = lane % 4; returns the 4 new accumulators.
    """
    res = llvm.inline_asm(
        llvm.StructType.get_literal([T.f32()] * 4),
        [cutlass.Uint32(x).ir_value(loc=loc, ip=ip) for x in (*a, *b)]
        + [cutlass.Float32(x).ir_value(loc=loc, ip=ip) for x in c],
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
        "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f",
        loc=loc,
        ip=ip,
    )
    return [cutlass.Float32(llvm.extractvalue(T.f32(), res, [i], loc=loc, ip=ip)) for i in range(4)]


def _i32_asm(asm: str, constraints: str, operands, loc, ip):
    """One int32 result of ``asm`` (inline PTX with side effects: never hoisted or merged)."""
    res = llvm.inline_asm(
        T.i32(), operands, asm, constraints, has_side_effects=True, loc=loc, ip=ip
    )
    return cutlass.Int32(res)


def _atom_gpu(op: str, address, value, loc, ip):
    """Relaxed gpu-scope atomic ``op`` ("add.s32", "exch.b32") on the int32 at global
    ``address`` with ``value``; returns the old value."""
    operands = [
        cutlass.Int64(address).ir_value(loc=loc, ip=ip),
        cutlass.Int32(value).ir_value(loc=loc, ip=ip),
    ]
    return _i32_asm(f"atom.relaxed.gpu.global.{op} $0, [$1], $2;", "=r,l,r", operands, loc, ip)


@dsl_user_op
def atom_add_gpu(address, value, *, loc=None, ip=None):
    """Relaxed gpu-scope atomic add to the int32 at global ``address``; returns the old value."""
    return _atom_gpu("add.s32", address, value, loc, ip)


@dsl_user_op
def atom_exch_gpu(address, value, *, loc=None, ip=None):
    """Relaxed gpu-scope exchange of the int32 at global ``address``; returns the old value."""
    return _atom_gpu("exch.b32", address, value, loc, ip)


@dsl_user_op
def red_add_release_gpu(address, value, *, loc=None, ip=None):
    """Adds ``value`` to the int32 at global ``address`` with gpu-scope release semantics: what
    this thread wrote before (and what its fence made visible) is seen by an acquiring reader
    of the sum."""
    llvm.inline_asm(
        None,
        [
            cutlass.Int64(address).ir_value(loc=loc, ip=ip),
            cutlass.Int32(value).ir_value(loc=loc, ip=ip),
        ],
        "red.release.gpu.global.add.s32 [$0], $1;",
        "l,r",
        has_side_effects=True,
        loc=loc,
        ip=ip,
    )


@dsl_user_op
def ld_acquire_gpu(address, *, loc=None, ip=None):
    """The int32 at global ``address``, loaded with gpu-scope acquire semantics."""
    operands = [cutlass.Int64(address).ir_value(loc=loc, ip=ip)]
    return _i32_asm("ld.acquire.gpu.global.s32 $0, [$1];", "=r,l", operands, loc, ip)


@dsl_user_op
def ld_relaxed_gpu(address, *, loc=None, ip=None):
    """The int32 at global ``address`` as the GPU's L2 holds it (never a stale L1 line)."""
    operands = [cutlass.Int64(address).ir_value(loc=loc, ip=ip)]
    return _i32_asm("ld.relaxed.gpu.global.s32 $0, [$1];", "=r,l", operands, loc, ip)


@dsl_user_op
def st_zero16(address, *, loc=None, ip=None):
    """Writes 16 zero bytes at global ``address`` (16-byte aligned): one vector store."""
    llvm.inline_asm(
        None,
        [cutlass.Int64(address).ir_value(loc=loc, ip=ip)],
        """{
        .reg .b32 z;
        mov.b32 z, 0;
        st.global.v4.b32 [$0], {z, z, z, z};
        }""",
        "l",
        has_side_effects=True,
        loc=loc,
        ip=ip,
    )
