"""The finalize output's zero fill, done inside the GEMM kernel by warps that are idle otherwise.

The finalize epilogue adds each valid row, times its router weight, into its token's row of the
bf16 [num_tokens, n] output with atomics, so those rows must be zero before the first add; every
other token's row must be zero at the end. Zeroing the whole output in a pass before the kernel
writes it twice and, where few tokens are routed here (the first layer's 8192 tokens, 1024 of
them with local rows), costs a quarter of the call (NOTES.md, twelfth session). Here the three
idle warps of the producer warpgroup (the WGMMA kernel's and the 256-token RS kernel's) fill it
while the MMA warpgroups compute, in two phases of work claimed from counters, 32 rows a claim:

- A: over the valid permuted rows; each row's token is marked (an atomic exchange, so a token
  with several local rows is zeroed once) and its output row zeroed. A claim counts as done
  once its stores are visible at gpu scope (fence, then a release add).
- B: once every phase-A claim is done, over the tokens: the rows of unmarked tokens are zeroed.
  Nothing waits for these.

A consumer thread waits for phase A's count before its CTA's first atomic add (``wait_marked``).
Only running warps claim work, and a claimed piece never waits on anything, so the wait ends
whichever CTAs are resident. The workspace (int32 [HEADER + num_tokens], zeroed by the
launcher) holds the counters, then a mark per token; the kernel reads num_tokens off its size.
"""

import cutlass
import cutlass.cute as cute

from stagebot.kernels.cute.ptx import (
    atom_add_gpu,
    atom_exch_gpu,
    ld_acquire_gpu,
    ld_relaxed_gpu,
    red_add_release_gpu,
    st_zero16,
)

HEADER = 4  # int32 words before the marks: the counters below, one spare (16-byte alignment)
NEXT_A, DONE_A, NEXT_B = 0, 1, 2
CLAIM = 32  # rows (phase A) or tokens (phase B) per claim: one per lane
IDLE_WARPS = 3  # of a producer warpgroup, beside its producer warp


def workspace_words(num_tokens: int) -> int:
    return HEADER + num_tokens


def _word(base, index):
    """Byte address of int32 word ``index`` of the workspace at ``base``."""
    return base + cutlass.Int64(index) * 4


@cute.jit
def _claim(base, counter, lane):
    """The next piece of the counter's phase, claimed by lane 0 for the warp."""
    piece = cutlass.Int32(0)
    if lane == 0:
        piece = atom_add_gpu(_word(base, counter), 1)
    return cute.arch.shuffle_sync(piece, 0)


@cute.jit
def _zero_rows(token, out_address, lane, n: cutlass.Constexpr):
    """Zeroes the output row of each lane's ``token`` (>= 0; -1: none), the warp together."""
    vectors = n * 2 // 16  # 16-byte stores per row
    for i in cutlass.range(CLAIM, unroll=1):
        t = cute.arch.shuffle_sync(token, i)
        if t >= 0:
            row = out_address + cutlass.Int64(t) * (n * 2)
            for j in cutlass.range_constexpr((vectors + 31) // 32):
                v = 32 * j + lane
                if cutlass.const_expr(vectors % 32 == 0):
                    st_zero16(row + cutlass.Int64(v) * 16)
                else:
                    if v < vectors:
                        st_zero16(row + cutlass.Int64(v) * 16)


def marked_claims(num_tiles, tile_size):
    """Phase A's claims: the rows of the non-exiting tiles, CLAIM at a time."""
    return (num_tiles * tile_size + CLAIM - 1) // CLAIM


@cute.jit
def fill_output(
    mWork: cute.Tensor,
    mP2e: cute.Tensor,
    mLimit: cute.Tensor,
    num_tiles: cutlass.Int32,
    out_address: cutlass.Int64,
    n: cutlass.Constexpr,
    tile_size: cutlass.Constexpr,
    top_k: cutlass.Constexpr,
    unrouted: cutlass.Constexpr = True,
):
    """One idle warp's share of the fill (both phases, see the module's docstring; phase A
    only without ``unrouted``, a diagnostic build's)."""
    mark_routed(mWork, mP2e, mLimit, num_tiles, out_address, n, tile_size, top_k)
    if cutlass.const_expr(unrouted):
        zero_unrouted(mWork, out_address, n)


@cute.jit
def mark_routed(
    mWork: cute.Tensor,
    mP2e: cute.Tensor,
    mLimit: cute.Tensor,
    num_tiles: cutlass.Int32,
    out_address: cutlass.Int64,
    n: cutlass.Constexpr,
    tile_size: cutlass.Constexpr,
    top_k: cutlass.Constexpr,
):
    """Phase A, one warp's share: each routed token's row zeroed once and marked; returns
    when every warp's phase A is done (the warp may then add into routed rows)."""
    lane = cute.arch.lane_idx()
    base = mWork.iterator.toint()
    rows = num_tiles * tile_size
    claims_a = marked_claims(num_tiles, tile_size)
    piece = _claim(base, NEXT_A, lane)
    while piece < claims_a:
        row = piece * CLAIM + lane
        token = cutlass.Int32(-1)
        if row < rows:
            if row < mLimit[row // tile_size]:
                expanded = mP2e[row]
                if expanded >= 0:
                    t = expanded // top_k
                    if atom_exch_gpu(_word(base, HEADER + t), 1) == 0:
                        token = t
        _zero_rows(token, out_address, lane, n)
        cute.arch.fence_acq_rel_gpu()
        cute.arch.sync_warp()
        if lane == 0:
            red_add_release_gpu(_word(base, DONE_A), 1)
        piece = _claim(base, NEXT_A, lane)
    if lane == 0:
        wait_marked(mWork, num_tiles, tile_size)
    cute.arch.sync_warp()


@cute.jit
def zero_unrouted(mWork: cute.Tensor, out_address: cutlass.Int64, n: cutlass.Constexpr):
    """Phase B, one warp's share, after phase A: the rows of the tokens no row was routed to
    (no add touches them, so it may run before, beside or after the adds)."""
    lane = cute.arch.lane_idx()
    base = mWork.iterator.toint()
    num_tokens = cute.size(mWork) - HEADER
    claims_b = (num_tokens + CLAIM - 1) // CLAIM
    piece = _claim(base, NEXT_B, lane)
    while piece < claims_b:
        t = piece * CLAIM + lane
        token = cutlass.Int32(-1)
        if t < num_tokens:
            if ld_relaxed_gpu(_word(base, HEADER + t)) == 0:
                token = t
        _zero_rows(token, out_address, lane, n)
        piece = _claim(base, NEXT_B, lane)


@cute.jit
def wait_marked(mWork: cute.Tensor, num_tiles: cutlass.Int32, tile_size: cutlass.Constexpr):
    """Spins until every phase-A claim is done: every routed token's row is zero and visible.
    One thread waits; a barrier after it orders the others' adds."""
    address = _word(mWork.iterator.toint(), DONE_A)
    claims_a = marked_claims(num_tiles, tile_size)
    done = ld_acquire_gpu(address)
    while done < claims_a:
        done = ld_acquire_gpu(address)
