"""NVFP4 grouped GEMMs with the weights fed to WGMMA from registers (Hopper sm_90a, CuTe DSL 4.3.5).

Many tokens per expert (the T8192 layers): the WGMMA kernel (stagebot.kernels.cute.grouped_gemm)
dequantises the weights per tile into shared memory, where WGMMA reads them again, and that
traffic contends with WGMMA's own (NOTES.md). Here, as in the decode kernel, the roles swap
(C^T = B A^T): the weights are WGMMA's A operand, dequantised straight into its register
fragments (the RS form), and the tokens are the N side, as fp16 made once per call
(triton_elementwise.nvfp4_operand, order "registers") and TMA-loaded into WGMMA's B layout.

Pipeline (persistent, one CTA per SM, warp-specialised):
1. Producer warp (warp 8): per work item (a tile's tokens, 128 weight rows of its expert) and
   64-wide K step, TMA-loads the packed weights (128 rows x 32 bytes), their scale chunk (512
   bytes) and the tokens (tokens x 64 fp16, 128-byte swizzle) into a ``stages``-deep ring.
2. Two consumer warpgroups of 64 weight rows each. Thread (g, q) of warp w loads 8 bytes of
   rows 16 w + g and 16 w + g + 8 (K values 16 q .. 16 q + 15, one scale byte per row), turns
   them into the A fragments of the K step's four k16 WGMMAs (m64 x tokens, fp32 accumulators)
   and issues them, then waits for them (the fragments and the stage's tokens are free again)
   and frees the stage. While one warpgroup dequantises, the other's WGMMAs keep the tensor
   cores busy.
3. Epilogue: as the decode kernel's (accumulators -> fp32 stage [tokens, 128] -> the op's rows).

256 tokens per work item (tactic tile_mn (256, 128)): m64n256k16 WGMMAs, so each dequantised
weight value feeds twice the MACs. Over table tiles of 128 an item is a pair of tiles: one span
of 256 tokens when both are one expert's (the first full), else each tile alone (the other
half of the tokens computed and never stored). The tokens arrive as two TMA boxes of 128 per
stage; the accumulators leave through the 128-token epilogue stage in two turns. 128
accumulators and two fragment sets need ~190 registers a thread, more than a 288-thread CTA
gets, so the producer warp has a warpgroup of its own that hands its registers over.

K order: e2m1x8_to_f16x8 turns a packed word into the pairs (n_s, n_s+4), s = 0..3; pair s of
thread q's word h is the A fragment's column pair 2 q + 8 h of k16 step s. The tokens carry the
same permutation ("registers" order), so the dot products are unchanged; the products and the
fp32 accumulation are the WGMMA kernel's (e2m1 and e4m3 placed in fp16 bits, alpha * 2^14).
"""

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.pipeline import pipeline_init_wait

from stagebot.kernels.cute import epilogues, finalize_fill
from stagebot.kernels.cute.decode_gemm import CONSUMER_WARPS, WEIGHT_ROWS, WeightRowsGemm
from stagebot.kernels.cute.grouped_gemm import (
    BK,
    OPERAND_UNSCALE,
    SF_CHUNK_ROWS,
    first_failure,
    operand_loads,
    operand_tma,
    stage_bytes,
    staging_layout,
    tma_source,
)
from stagebot.kernels.cute.ptx import e2m1x8_to_f16x8, e4m3_to_f16x2
from stagebot.kernels.cute.tactics import Tactic

# Tokens per group (WGMMA's N). 256 halves the weights' dequantisation per MAC; over table
# tiles of 128 a work item then takes two tiles, one span when they are one expert's.
TOKEN_CHOICES = (128, 256)
TMA_TOKENS = 128  # rows of one token TMA box: a ring stage holds tokens // 128 boxes
PRODUCER_REGS, CONSUMER_REGS = 40, 232  # setmaxnreg budgets with a producer warpgroup

K_BLOCKS = BK // 16  # k16 WGMMAs per K step
# bf16 per token row of the drain build's hand-over: 128 weight rows and 8 of pad, so that a
# row is 16-byte aligned and the 4 lanes of a quad (tokens 2 apart) write to different banks
HANDOVER_PITCH = WEIGHT_ROWS + 8
DRAIN_THREADS = 96  # warps 9-11: the producer warpgroup beside the producer warp


class Nvfp4RsGemmSm90(WeightRowsGemm):
    """NVFP4 weights x fp16 tokens contiguous grouped GEMM, weights from registers."""

    # Diagnostic builds for timing only (their results are wrong): "no_dequant" feeds the packed
    # words to the WGMMAs unconverted; the 256-token finalize's "no_unrouted" zeroes the routed
    # tokens' rows only (phase A), "no_adds" stages its rows but adds nothing, and
    # "drain_no_adds" hands each item over to warps 9-11, which add nothing. "drain" (the
    # epilogue beside the next item's K loop) and the finalize without any fill (zeroed_output)
    # give the kernel's result.
    VARIANTS = ("", "no_dequant", "no_unrouted", "no_adds", "drain", "drain_no_adds")

    def __init__(self, tactic: Tactic, *args, **kwargs):
        super().__init__(tactic, *args, **kwargs)
        # 256 tokens: 128 accumulators and two fragment sets take ~190 registers per consumer
        # thread, and ptxas caps a 288-thread CTA at 168 (it counts whole warpgroups), then
        # serialises the WGMMAs (C7512). The producer warp then gets a warpgroup of its own
        # that hands its registers to the consumers (setmaxnreg).
        self.producer_warpgroup = self.tokens > 128
        self.fills_output = (
            self.epilogue == "finalize"
            and self.fills_finalize_output(tactic)
            and not self.zeroed_output
        )
        # The 256-token finalize's "drain" build: the consumers hand each item over in bf16 and
        # go on to the next item's K loop while warps 9-11 add it into the output.
        self.drains = (
            self.variant in ("drain", "drain_no_adds")
            and self.epilogue == "finalize"
            and self.tokens > 128
        )
        if self.producer_warpgroup:
            self.threads_per_cta = self.num_consumers + 128
            # setmaxnreg.inc waits until the registers given back cover it: budgets above the
            # launch's allocation (65536 / threads, in eights) would wait forever.
            allocated = 65536 // self.threads_per_cta // 8 * 8 * self.threads_per_cta
            assert 128 * PRODUCER_REGS + self.num_consumers * CONSUMER_REGS <= allocated

    @classmethod
    def fills_finalize_output(cls, tactic: Tactic) -> bool:
        """With 256 tokens: the producer warpgroup's three warps beside the producer warp."""
        return tactic.tile_mn[0] > 128

    @staticmethod
    def smem_bytes(tactic: Tactic) -> int:
        tokens = tactic.tile_mn[0]
        stage = stage_bytes(WEIGHT_ROWS, False) + stage_bytes(tokens, True)
        epilogue_stage = Nvfp4RsGemmSm90.epilogue_stage_bytes(tokens)
        if tokens > 128:  # room for the drain build's bf16 hand-over and its rows' info
            epilogue_stage = max(epilogue_stage, tokens * HANDOVER_PITCH * 2 + tokens * 8)
        return tactic.stages * stage + epilogue_stage + 2 * 1024

    @classmethod
    def can_implement(
        cls, tactic: Tactic, n: int, k: int, tile_size: int, epilogue: str = "store"
    ) -> tuple[bool, str]:
        """(ok, the first failed constraint with its values) for this tactic and problem."""
        tokens, rows = tactic.tile_mn
        smem = cls.smem_bytes(tactic)
        checks = (
            (
                tactic.swap_ab and tactic.fp16_operand == "a",
                "the RS kernel runs swap_ab tactics with the tokens in fp16 (fp16_operand 'a')",
            ),
            (
                tokens in TOKEN_CHOICES and rows == WEIGHT_ROWS,
                f"tile {tokens}x{rows} must be {' | '.join(map(str, TOKEN_CHOICES))} tokens x "
                f"{WEIGHT_ROWS} weight rows",
            ),
            (
                tactic.wg_split == "m" and not tactic.sparse_rows and tactic.ctas_per_sm == 1,
                "wg_split, sparse_rows and ctas_per_sm are other kernels' knobs",
            ),
            *cls.shared_checks(tactic, n, epilogue, smem),
            (
                k % (2 * BK) == 0,
                f"K={k} must be a multiple of {2 * BK} (K steps of {BK} go in pairs)",
            ),
            (
                tile_size % SF_CHUNK_ROWS == 0
                and (tile_size % tokens == 0 or tokens == 2 * tile_size),
                f"tile_size={tile_size} must be a multiple of {SF_CHUNK_ROWS} and of {tokens} "
                "tokens, or half of them",
            ),
        )
        return first_failure(tactic, checks)

    # ----------------------------------------------------------------------------------------
    def _launch(self, operands, outputs, grid_ctas, n, tile_size, top_k, stream):
        """Launches the kernel on the global views GroupedGemmCall.__call__ made."""
        mA, mB, _, mBs = operands
        mC, epilogue_tensors, mAlpha, mGroup, mNumTiles = outputs
        k_major = utils.LayoutEnum.ROW_MAJOR
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            cutlass.Float16,
            cutlass.Float16,
            k_major.sm90_mma_major_mode(),
            k_major.sm90_mma_major_mode(),
            cutlass.Float32,
            (2, 1, 1),
            tiler_mn=(64, self.tokens),
            a_source=cute.nvgpu.warpgroup.OperandSource.RMEM,
        )
        t_layout = sm90_utils.make_smem_layout_b(
            k_major, (WEIGHT_ROWS, self.tokens, BK), cutlass.Float16, self.stages
        )
        # The same bytes as TMA boxes of 128 tokens: WGMMA's K-major layout stacks its 8-row
        # swizzle atoms along the tokens, so box h of stage s is rows 128 h .. of stage s.
        boxes = self.tokens // TMA_TOKENS
        t_box_layout = sm90_utils.make_smem_layout_b(
            k_major, (WEIGHT_ROWS, TMA_TOKENS, BK), cutlass.Float16, self.stages * boxes
        )
        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        w_tma = operand_tma(g2s, mB, mBs, None, WEIGHT_ROWS, False)
        t_tma = operand_tma(g2s, mA, None, t_box_layout, TMA_TOKENS, True)
        self.tx_bytes = stage_bytes(WEIGHT_ROWS, False) + stage_bytes(self.tokens, True)

        @cute.struct
        class SharedStorage:
            ring_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            sWq: cute.struct.Align[
                cute.struct.MemRange[cutlass.Uint8, WEIGHT_ROWS * BK // 2 * self.stages], 128
            ]
            sWs: cute.struct.Align[cute.struct.MemRange[cutlass.Int32, 128 * self.stages], 128]
            sT: cute.struct.Align[
                cute.struct.MemRange[cutlass.Float16, cute.cosize(t_layout)], 1024
            ]
            if self.drains:  # the hand-over and its rows' info in the fp32 stage's place
                sH: cute.struct.Align[
                    cute.struct.MemRange[cutlass.BFloat16, self.tokens * HANDOVER_PITCH], 128
                ]
                sInfo: cute.struct.Align[cute.struct.MemRange[cutlass.Float32, self.tokens * 2], 16]
            else:
                sE: self._epilogue_stage_field()

        self.shared_storage = SharedStorage

        kernel_call = self.kernel(
            w_tma, t_tma, t_layout, t_box_layout, tiled_mma, mC, epilogue_tensors, mAlpha, mGroup,
            mNumTiles, n, tile_size, top_k,
        )  # fmt: skip
        self._launch_persistent(kernel_call, grid_ctas, stream)

    # ----------------------------------------------------------------------------------------
    @cute.kernel
    def kernel(
        self,
        w_tma: tuple,  # (atom, tensor) of the packed weights, then of their scale chunks
        t_tma: tuple,  # (atom, tensor) of the fp16 tokens
        t_layout: cute.ComposedLayout,  # the tokens' ring stages, WGMMA's B layout
        t_box_layout: cute.ComposedLayout,  # the same bytes as the TMA's 128-token boxes
        tiled_mma: cute.TiledMma,
        mC: cute.Tensor,
        epilogue_tensors: tuple,  # (mCsf, mGlobalSf, mLimit, mP2e, mRouter, mWork)
        mAlpha: cute.Tensor,
        mGroup: cute.Tensor,
        mNumTiles: cute.Tensor,
        n: cutlass.Constexpr,
        tile_size: cutlass.Constexpr,
        top_k: cutlass.Constexpr,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == CONSUMER_WARPS:
            for atom in (*w_tma[0::2], t_tma[0]):
                cute.nvgpu.cpasync.prefetch_descriptor(atom)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        ring = self._ring(storage)

        sWq = storage.sWq.get_tensor(staging_layout(WEIGHT_ROWS, self.stages))
        sWs = storage.sWs.get_tensor(cute.make_layout((128, 1, 1, self.stages)))
        sT = storage.sT.get_tensor(t_layout.outer, swizzle=t_layout.inner)
        sT_boxes = storage.sT.get_tensor(t_box_layout.outer, swizzle=t_box_layout.inner)
        w_loads = operand_loads(w_tma, None, sWq, sWs, WEIGHT_ROWS, False, True)
        t_loads = operand_loads(t_tma, sT_boxes, None, None, TMA_TOKENS, True, False)
        k_steps = cute.size(t_loads[0][1], mode=[2])
        n_blocks = n // WEIGHT_ROWS
        num_tiles = mNumTiles[0]

        pipeline_init_wait(cluster_shape_mn=(1, 1))
        if warp_idx >= CONSUMER_WARPS:
            if cutlass.const_expr(self.producer_warpgroup):
                cute.arch.warpgroup_reg_dealloc(PRODUCER_REGS)
            if warp_idx == CONSUMER_WARPS:
                self._produce(
                    ring, (w_loads, t_loads), k_steps, n_blocks, num_tiles, bidx, gdim,
                    tile_size, epilogue_tensors[2], mGroup,
                )  # fmt: skip
            if warp_idx > CONSUMER_WARPS:
                _, _, mLimit, mP2e, _, mWork = epilogue_tensors
                out_address = mC.iterator.toint()
                if cutlass.const_expr(self.fills_output and not self.drains):
                    finalize_fill.fill_output(
                        mWork, mP2e, mLimit, num_tiles, out_address, n, tile_size, top_k,
                        self.variant != "no_unrouted",
                    )  # fmt: skip
                if cutlass.const_expr(self.drains):
                    self._handover_barriers()[0].arrive()  # the hand-over starts empty
                    if cutlass.const_expr(self.fills_output):  # the adds wait for phase A only
                        finalize_fill.mark_routed(
                            mWork, mP2e, mLimit, num_tiles, out_address, n, tile_size, top_k
                        )
                    self._drain(
                        storage, n_blocks, num_tiles, tidx, bidx, gdim, mC, mLimit, mGroup, n,
                        tile_size,
                    )  # fmt: skip
                    if cutlass.const_expr(self.fills_output):
                        finalize_fill.zero_unrouted(mWork, out_address, n)

        if warp_idx < CONSUMER_WARPS:
            if cutlass.const_expr(self.producer_warpgroup):
                cute.arch.warpgroup_reg_alloc(CONSUMER_REGS)
            self._consume(
                storage, sT, ring, tiled_mma, k_steps, n_blocks, num_tiles, tidx, bidx, gdim,
                mC, epilogue_tensors, mAlpha, mGroup, n, tile_size, top_k,
            )  # fmt: skip

    def _issue_loads(self, loads, s, bar, n_block, kk, expert, row0):
        """K step ``kk`` of the item's packed weights and scale chunk, then of its fp16 tokens
        (boxes of 128 from row0, a multiple of 128), into stage s. A box past the tokens' rows
        is filled with zeros by the TMA; columns of tokens past the span are never stored."""
        w_loads, t_loads = loads
        for atom, gX, sX, scales in w_loads:
            src = tma_source(gX, scales, (n_block, kk, expert))
            cute.copy(atom, src, sX[(None, s)], tma_bar_ptr=bar)
        boxes = self.tokens // TMA_TOKENS
        for atom, gX, sX, scales in t_loads:
            for h in range(boxes):  # unrolled at trace time
                src = tma_source(gX, scales, (row0 // TMA_TOKENS + h, kk))
                cute.copy(atom, src, sX[(None, s * boxes + h)], tma_bar_ptr=bar)

    # ----------------------------------------------------------------------------------------
    @cute.jit
    def _consume(
        self, storage, sT, ring, tiled_mma, k_steps, n_blocks, num_tiles, tidx, bidx, gdim,
        mC, epilogue_tensors, mAlpha, mGroup, n, tile_size, top_k,
    ):  # fmt: skip
        """The consumer warpgroups' loop over their work items: K steps, then the epilogue."""
        mCsf, mGlobalSf, mLimit, mP2e, mRouter, mWork = epilogue_tensors
        warp = cute.arch.make_warp_uniform(tidx // 32)
        lane = tidx % 32
        g = lane // 4
        q = lane % 4
        wg = warp // 4
        sWq32 = cute.make_tensor(
            cute.recast_ptr(storage.sWq.data_ptr(), dtype=cutlass.Uint32),
            cute.make_layout(WEIGHT_ROWS * BK // 8 * self.stages),
        )
        sWs = storage.sWs.get_tensor(cute.make_layout(128 * self.stages))
        barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=self.num_consumers)
        if cutlass.const_expr(self.drains):
            sH, sInfo = self._handover(storage)
            empty, full = self._handover_barriers()
        else:
            sE = self._epilogue_stage(storage)
        # B (the tokens) is read by the warpgroup as a whole; A's fragments and the
        # accumulators are the thread's own.
        tCrB = tiled_mma.make_fragment_B(tiled_mma.get_slice(wg * 128).partition_B(sT))
        thr_mma = tiled_mma.get_slice(tidx)
        a_shape = thr_mma.partition_A(cute.make_identity_tensor((WEIGHT_ROWS, BK))).shape
        # Two sets of A fragments: a K step's are written while the previous step's WGMMAs,
        # which read the other set, run.
        frags = [tiled_mma.make_fragment_A(a_shape) for _ in range(2)]
        tCcC = thr_mma.partition_C(cute.make_identity_tensor((WEIGHT_ROWS, self.tokens)))
        acc = cute.make_rmem_tensor(tCcC.shape, cutlass.Float32)
        rows = (16 * warp + g, 16 * warp + g + 8)  # this thread's weight rows of the item's 128
        weights = (sWq32, sWs, rows, q)

        # Step kk + 1's fragments are made while step kk's WGMMAs run, then step kk is awaited
        # (wait_group(0)), its stage freed and step kk + 1 issued. ptxas serialises every
        # WGMMA when fragments are written while an earlier WGMMA of the same wait window
        # runs (C7513), so each step's WGMMAs are awaited before the next step's are issued;
        # the other warpgroup's WGMMAs fill the gap. The last step is peeled: it has no next
        # step to make fragments for. The ring states advance here, not in a helper (a state
        # advanced in a helper is not carried across loop turns).
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        done = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        total_work = self._total_work(num_tiles, n_blocks, tile_size)
        marked = cutlass.Int32(0)  # finalize filling its output: the routed tokens' rows are 0
        for work in cutlass.range(bidx, total_work, gdim, unroll=1):
            n_block = work % n_blocks
            first, spans, joined = self._spans(
                work // n_blocks, num_tiles, tile_size, mGroup, mLimit
            )
            for span in cutlass.range(spans, unroll=1):
                tile, span_row0, limit = self._span(first, span, joined, tile_size, mLimit)
                expert = mGroup[tile]
                for row0 in cutlass.range(span_row0, limit, self.tokens, unroll=1):
                    acc.fill(0.0)
                    tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
                    self._fragments(ring, read, frags[0], *weights)
                    for pair in cutlass.range(k_steps // 2, unroll=1):
                        for x in cutlass.range_constexpr(2):
                            self._mma(tiled_mma, acc, frags[x], tCrB, read.index)
                            read.advance()
                            if cutlass.const_expr(x == 0):
                                self._fragments(ring, read, frags[1], *weights)
                            else:
                                if pair < k_steps // 2 - 1:
                                    self._fragments(ring, read, frags[0], *weights)
                            cute.nvgpu.warpgroup.wait_group(0)
                            ring.consumer_release(done)
                            done.advance()
                    scale = mAlpha[expert] * OPERAND_UNSCALE
                    if cutlass.const_expr(self.drains):
                        info = self._row_info_of(row0 + tidx, limit, mP2e, mRouter, scale, top_k)
                        empty.arrive_and_wait()  # the drain has added the last hand-over
                        sInfo[tidx, 0] = info[0]
                        sInfo[tidx, 1] = info[1]
                        barrier.arrive_and_wait()
                        self._hand_over(acc, tCcC, sH, sInfo)
                        full.arrive()
                    if cutlass.const_expr(self.fills_output and not self.drains):
                        if marked == 0:  # before the CTA's first add (_stage_out's barrier)
                            if tidx == 0:
                                finalize_fill.wait_marked(mWork, num_tiles, tile_size)
                            marked = cutlass.Int32(1)
                    out = (
                        scale, limit, n_block, tidx, mC, mCsf, mGlobalSf, mP2e, mRouter, n, top_k,
                    )  # fmt: skip
                    for h in cutlass.range_constexpr(
                        0 if self.drains else self.tokens // self.stage_tokens
                    ):
                        if cutlass.const_expr(h == 0):
                            self._stage_out(h, acc, tCcC, sE, barrier, row0, out)
                        else:  # the span may end before this stage's tokens
                            if row0 + h * self.stage_tokens < limit:
                                self._stage_out(h, acc, tCcC, sE, barrier, row0, out)
        if cutlass.const_expr(self.drains):
            empty.arrive_and_wait()  # matches the drain's arrival after its last item

    def _handover(self, storage):
        """The drain build's shared memory: the hand-over (bf16 [tokens, weight rows]) and
        each token row's (router weight * scale, token or -1)."""
        sH = storage.sH.get_tensor(
            cute.make_layout((self.tokens, WEIGHT_ROWS), stride=(HANDOVER_PITCH, 1))
        )
        sInfo = storage.sInfo.get_tensor(cute.make_layout((self.tokens, 2), stride=(2, 1)))
        return sH, sInfo

    @staticmethod
    def _hand_over(acc, tCcC, sH, sInfo):
        """The accumulators times their token's router weight * scale, rounded to bf16 (the
        bits the atomics add), into the hand-over [token, weight row]."""
        for i in range(cute.size(acc)):  # unrolled at trace time
            row, token = tCcC[i]
            sH[token, row] = cutlass.BFloat16(acc[i] * sInfo[token, 0])

    def _handover_barriers(self):
        """(EMPTY, FULL): the consumers wait on EMPTY before writing a hand-over and arrive on
        FULL after; the drain waits on FULL before adding it and arrives on EMPTY after. The
        drain arrives on EMPTY once before its first item and the consumers wait on it once
        after their last, so every arrival is matched."""
        threads = self.num_consumers + DRAIN_THREADS
        return (
            pipeline.NamedBarrier(barrier_id=2, num_threads=threads),
            pipeline.NamedBarrier(barrier_id=3, num_threads=threads),
        )

    @cute.jit
    def _row_info_of(self, row, limit, mP2e, mRouter, scale, top_k: cutlass.Constexpr):
        """(router weight * scale, token as fp32) of table row ``row``; (0, -1) past the
        span's limit or for a row no token was routed to."""
        weight = cutlass.Float32(0.0)
        token = cutlass.Float32(-1.0)
        if row < limit:
            expanded = mP2e[row]
            if expanded >= 0:
                weight = mRouter[expanded] * scale
                token = cutlass.Float32(expanded // top_k)
        return weight, token

    @cute.jit
    def _drain(
        self, storage, n_blocks, num_tiles, tidx, bidx, gdim, mC, mLimit, mGroup, n, tile_size,
    ):  # fmt: skip
        """Warps 9-11 of the drain build: the consumers' walk over the work items (the
        producer's), each hand-over added into the output once the consumers made it."""
        sH, sInfo = self._handover(storage)
        sH32 = cute.make_tensor(
            cute.recast_ptr(sH.iterator, dtype=cutlass.Uint32),
            cute.make_layout((self.tokens, WEIGHT_ROWS // 2), stride=(HANDOVER_PITCH // 2, 1)),
        )
        empty, full = self._handover_barriers()
        first_thread = tidx - (self.num_consumers + 32)
        total_work = self._total_work(num_tiles, n_blocks, tile_size)
        for work in cutlass.range(bidx, total_work, gdim, unroll=1):
            n_block = work % n_blocks
            first, spans, joined = self._spans(
                work // n_blocks, num_tiles, tile_size, mGroup, mLimit
            )
            for span in cutlass.range(spans, unroll=1):
                _, span_row0, limit = self._span(first, span, joined, tile_size, mLimit)
                for row0 in cutlass.range(span_row0, limit, self.tokens, unroll=1):
                    valid = limit - row0
                    if valid > self.tokens:
                        valid = self.tokens
                    full.arrive_and_wait()
                    if cutlass.const_expr(self.variant == "drain"):
                        epilogues.finalize_rows(
                            sH32, sInfo, valid, n_block * WEIGHT_ROWS, mC.iterator.toint(),
                            cutlass.Int64(n * 2), first_thread, DRAIN_THREADS, rounded=True,
                        )  # fmt: skip
                    empty.arrive()

    def _stage_out(self, h, acc, tCcC, sE, barrier, row0, out):
        """Tokens h * stage_tokens .. of the accumulators into the fp32 stage, then the op's
        epilogue over them. The accumulator's values 4 v .. 4 v + 3 are its n8 column block v
        (tokens 8 v .. 8 v + 7), so a stage's tokens are a contiguous run of blocks."""
        scale, limit, n_block, tidx, mC, mCsf, mGlobalSf, mP2e, mRouter, n, top_k = out
        scale_staged = self._staged_scale(scale)
        blocks = self.stage_tokens // 8
        first = row0 + h * self.stage_tokens
        info = self._row_info(first, limit, tidx, mP2e, mRouter, scale, top_k)
        barrier.arrive_and_wait()  # the previous epilogue has read the stage
        for v in range(h * blocks, (h + 1) * blocks):  # unrolled at trace time
            for j in range(4):
                row, token = tCcC[4 * v + j]
                sE[token - h * self.stage_tokens, row] = acc[4 * v + j] * scale_staged
        self._stage_row_info(sE, tidx, info)
        barrier.arrive_and_wait()
        self._write_staged(
            sE, scale, first, limit, n_block, tidx, mC, mCsf, mGlobalSf, mP2e, mRouter, n, top_k
        )

    @staticmethod
    def _mma(tiled_mma, acc, frag, tCrB, s):
        """The four k16 WGMMAs of the K step in stage s, A from ``frag``: issued and committed
        as one group, not awaited."""
        cute.nvgpu.warpgroup.fence()
        for kb in range(K_BLOCKS):  # unrolled at trace time
            cute.gemm(tiled_mma, acc, frag[(None, None, kb)], tCrB[(None, None, kb, s)], acc)
        cute.nvgpu.warpgroup.commit_group()

    def _fragments(self, ring, read, frag, sWq32, sWs, rows, q):
        """Waits for stage ``read``, then writes ``frag``: the A fragments (4 words per k16
        step) of its four k16 steps, from this thread's two weight rows, K values 16 q ..
        16 q + 15 (8 packed bytes, one scale byte each), dequantised."""
        ring.consumer_wait(read)
        s = read.index
        frag32 = cute.recast_tensor(frag, cutlass.Uint32)
        pairs = []
        for row in rows:  # unrolled at trace time
            words = cute.make_rmem_tensor((2,), cutlass.Uint32)
            first = (s * WEIGHT_ROWS + row) * (BK // 8) + 2 * q
            cute.autovec_copy(cute.local_tile(sWq32, (2,), (first // 2,)), words)
            # The row's scale word in the 128x4 swizzled chunk; byte q is K block q's.
            sf_word = cutlass.Uint32(sWs[s * 128 + (row % 32) * 4 + row // 32])
            scale = e4m3_to_f16x2(sf_word >> (8 * q))
            if cutlass.const_expr(self.variant == "no_dequant"):
                pairs.append([[words[h]] * 4 for h in range(2)])
            else:
                pairs.append([e2m1x8_to_f16x8(words[h], scale) for h in range(2)])
        for kb in range(K_BLOCKS):  # row g, row g + 8 at columns 2q; then both at 2q + 8
            for i, (r, h) in enumerate(((0, 0), (1, 0), (0, 1), (1, 1))):
                frag32[4 * kb + i] = pairs[r][h][kb]
