"""Decode NVFP4 grouped GEMMs for Hopper (sm_90a), CuTe DSL 4.3.5: weights as the MMA's M side.

At decode an expert's tile holds a few valid token rows, so the WGMMA kernel
(stagebot.kernels.cute.grouped_gemm) spends its time dequantising 128 x 256 weight values per K
step through shared memory for a handful of tokens. Here the roles swap (C^T = B A^T): the
weights are the MMA's A operand (M = 128 weight rows per work item, one m16 fragment per consumer
warp), dequantised straight into mma.sync's register fragments, never written back to shared
memory; the tokens are the N side (8 or 32 per work item, the tactic's tile_mn[0]). Same
results, same operations per product as the WGMMA kernel: e2m1 and e4m3 placed in fp16 bits
(exact), fp32 accumulation, alpha * 2^14 in the epilogue.

Pipeline (persistent, the tactic's ctas_per_sm CTAs per SM, warp-specialised):
1. Producer warp (warp 8): per work item (128 weight rows of one expert's tile), token group and
   256-wide K step, TMA-loads the packed weights (128 rows x 128 bytes, 128-byte swizzle), the
   tokens' packed rows (tokens x 128 bytes, same swizzle) and both operands' four 512-byte scale
   chunks into a ``stages``-deep ring.
2. Eight consumer warps per K step: load their weight rows' packed words and scales (a thread
   takes rows g and g + 8 of its warp's 16, the 64 K values of chunk q = lane % 4: two 16-byte
   loads per row, bank-conflict-free through the swizzle); the first warps dequantise the
   tokens into mma.sync B fragments in shared memory (each token value once per CTA); a named
   barrier; the stage is freed; then 16 k16 steps of mma.sync per token fragment, with the
   weights dequantised in registers. Two B-fragment buffers alternate, so the one barrier per K
   step also keeps a buffer from being rewritten while a slower warp still reads it.
3. Epilogue: the accumulators (weight row x token) go to a shared fp32 stage [tokens, 128], then
   every consumer thread takes (token, column) items of the op's epilogue
   (stagebot.kernels.cute.epilogues *_rows): bf16/fp32 rows, SwiGLU + NVFP4, or finalize atomics.

The K order inside a thread's chunk is the e2m1x8_to_f16x8 permutation, the same for weights and
tokens, so the dot products are unchanged. Work items are (tile, 128 weight rows), weight rows
fastest, strided over the grid; an item runs the K loop once per group of tokens below its
tile's row limit (at decode: once), so no item is scheduled that has nothing to do.
"""

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait

from stagebot.kernels.cute import epilogues
from stagebot.kernels.cute.grouped_gemm import (
    CTA_RESERVED_SMEM,
    EPILOGUES,
    OPERAND_UNSCALE,
    SF_CHUNK_ROWS,
    SM_SMEM,
    SMEM_CAPACITY,
    GroupedGemmCall,
    first_failure,
)
from stagebot.kernels.cute.ptx import e2m1x8_to_f16x8, e4m3_to_f16x2, mma_f16_m16n8k16
from stagebot.kernels.cute.tactics import Tactic

WEIGHT_ROWS = 128  # per work item: one m16 fragment per consumer warp
CONSUMER_WARPS = WEIGHT_ROWS // 16
KS = 256  # fp4 values per K step: 128 packed bytes per row, 4 scale chunks of 64 values
ROW_WORDS = KS // 8  # 32-bit words of packed codes per row and K step
STEPS = KS // 16  # mma.sync k16 steps per K step
SF_STEP_WORDS = 4 * 128  # the four 512-byte scale chunks of one K step, as int32 words
TOKEN_CHOICES = (8, 32)  # tokens per group: 1 or 4 mma n8 fragments (the ones run on the H200)
STAGE_PITCH = WEIGHT_ROWS + epilogues.STAGE_PAD  # fp32 words per token row of the epilogue stage
# Tokens the epilogue stages at a time: a work item with more (the RS kernel's 256) stages its
# accumulators in turns, since 256 tokens would take 132 KB of shared memory beside the ring.
MAX_STAGE_TOKENS = 128


class WeightRowsGemm(GroupedGemmCall):
    """What the kernels with the weights on the MMA's M side share: the constructor, the
    problem checks, the TMA ring and the producer warp's walk over it (a subclass's
    ``_issue_loads`` fills a stage), work items of (tile, 128 weight rows) and the epilogue from
    an fp32 stage in shared memory, [tokens, weight rows]. A subclass names its diagnostic
    builds in ``VARIANTS`` ("" is the kernel)."""

    VARIANTS: tuple[str, ...] = ("",)

    def __init__(
        self,
        tactic: Tactic,
        epilogue: str = "store",
        mn_limit: bool = False,
        variant: str = "",
        store_dtype: type[cutlass.Numeric] = cutlass.BFloat16,
        zeroed_output: bool = False,
    ):
        """The constructor of Nvfp4GroupedGemmSm90; the rows' dtype is the c pointer's, so
        ``store_dtype`` needs no state here. ``zeroed_output``: a finalize whose caller zeroed
        the output (a kernel that fills its own, fills_finalize_output, then does not)."""
        assert epilogue in EPILOGUES, epilogue
        assert variant in self.VARIANTS, variant
        self.variant = variant
        self.zeroed_output = zeroed_output
        self.fp16_operand = tactic.fp16_operand
        self.epilogue = epilogue
        self.uses_limit = mn_limit or epilogue == "finalize"
        self.tokens = tactic.tile_mn[0]
        self.stage_tokens = min(self.tokens, MAX_STAGE_TOKENS)
        self.stages = tactic.stages
        self.num_consumers = CONSUMER_WARPS * 32
        self.threads_per_cta = self.num_consumers + 32

    @staticmethod
    def shared_checks(tactic: Tactic, n: int, epilogue: str, smem: int) -> tuple:
        """The (ok, why) checks every weight-rows kernel makes, for first_failure."""
        return (
            (epilogue in EPILOGUES, f"epilogue {epilogue!r} is not one of {EPILOGUES}"),
            (tuple(tactic.cluster_mn) == (1, 1), "only cluster 1x1 is implemented"),
            (tactic.stages >= 2, f"stages is {tactic.stages}; the pipeline needs at least 2"),
            (
                smem <= SMEM_CAPACITY,
                f"needs {smem} B of shared memory; sm_90 allows {SMEM_CAPACITY} B",
            ),
            (n % WEIGHT_ROWS == 0, f"n={n} must be a multiple of {WEIGHT_ROWS}"),
        )

    @staticmethod
    def epilogue_stage_bytes(tokens: int) -> int:
        return min(tokens, MAX_STAGE_TOKENS) * STAGE_PITCH * 4

    def _epilogue_stage_field(self):
        """The SharedStorage field of the fp32 epilogue stage [stage tokens, 128 weight rows]."""
        return cute.struct.Align[
            cute.struct.MemRange[cutlass.Float32, self.stage_tokens * STAGE_PITCH], 128
        ]

    def _epilogue_stage(self, storage):
        return storage.sE.get_tensor(
            cute.make_layout((self.stage_tokens, WEIGHT_ROWS), stride=(STAGE_PITCH, 1))
        )

    def _launch_persistent(self, kernel_call, grid_ctas, stream) -> None:
        """Launches ``kernel_call`` (a traced kernel) on the persistent grid."""
        kernel_call.launch(
            grid=[grid_ctas, 1, 1],
            block=[self.threads_per_cta, 1, 1],
            cluster=[1, 1, 1],
            min_blocks_per_mp=1,  # a larger hint makes the DSL query the device at compile time
            stream=stream,
        )

    def _ring(self, storage):
        """The TMA ring: the producer warp's copies, released by every consumer warp."""
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ring_barriers.data_ptr(),
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_WARPS),
            tx_count=self.tx_bytes,
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)),
            defer_sync=True,
        )
        pipeline_init_arrive(cluster_shape_mn=(1, 1), is_relaxed=True)
        return ring

    def item_tiles(self, tile_size: int) -> int:
        """Table tiles per work item: two when an item's tokens span two tiles (the RS
        kernel's 256 tokens over tiles of 128), else one."""
        return max(1, self.tokens // tile_size)

    def _total_work(self, num_tiles, n_blocks, tile_size):
        per = self.item_tiles(tile_size)
        return (num_tiles + per - 1) // per * n_blocks

    @cute.jit
    def _spans(self, item, num_tiles, tile_size, mGroup, mLimit):
        """(first tile, spans, joined) of item ``item`` (its tiles, without the weight-row
        block): an item of two tiles of one expert, the first of them full, is one span of
        both (joined = 1); else each of its tiles below num_tiles is a span of its own. An
        expert's rows fill its tiles from its first, so only its last tile is partial."""
        per = self.item_tiles(tile_size)
        first = item * per
        spans, joined = 1, 0
        if cutlass.const_expr(per == 2):
            spans, joined = cutlass.Int32(1), cutlass.Int32(0)
            if first + 1 < num_tiles:
                spans = cutlass.Int32(2)
                if mGroup[first + 1] == mGroup[first]:
                    if self._tile_limit(first, tile_size, mLimit) == (first + 1) * tile_size:
                        spans, joined = cutlass.Int32(1), cutlass.Int32(1)
        return first, spans, joined

    def _tile_limit(self, tile, tile_size, mLimit):
        """The exclusive row limit of ``tile``: its tile_idx_to_mn_limit entry, or its end."""
        if cutlass.const_expr(self.uses_limit):
            return mLimit[tile]
        return (tile + 1) * tile_size

    def _span(self, first, span, joined, tile_size, mLimit):
        """(tile, first row, row limit) of span ``span`` of the item whose first tile is
        ``first``: a joined span ends at its second tile's limit."""
        tile = first + span
        return tile, tile * tile_size, self._tile_limit(tile + joined, tile_size, mLimit)

    @cute.jit
    def _produce(self, ring, loads, k_steps, n_blocks, num_tiles, bidx, gdim, tile_size, mLimit,
                 mGroup):  # fmt: skip
        """The producer warp: the consumers' walk over the work items, each K step of each
        block of an item's tokens one ring stage, filled by the kernel's ``_issue_loads``
        from ``loads`` (its TMA atoms and partitions)."""
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        total_work = self._total_work(num_tiles, n_blocks, tile_size)
        for work in cutlass.range(bidx, total_work, gdim, unroll=1):
            n_block = work % n_blocks
            first, spans, joined = self._spans(
                work // n_blocks, num_tiles, tile_size, mGroup, mLimit
            )
            for span in cutlass.range(spans, unroll=1):
                tile, span_row0, limit = self._span(first, span, joined, tile_size, mLimit)
                expert = mGroup[tile]
                for row0 in cutlass.range(span_row0, limit, self.tokens, unroll=1):
                    for kk in cutlass.range(k_steps, unroll=1):
                        ring.producer_acquire(state)
                        bar = ring.producer_get_barrier(state)
                        self._issue_loads(loads, state.index, bar, n_block, kk, expert, row0)
                        ring.producer_commit(state)
                        state.advance()
        ring.producer_tail(state)

    def _row_info_view(self, sE):
        """The staged rows' finalize info, fp32 [stage tokens, 2], in the first two pad words
        of each row of the stage: (router weight * scale, token or -1)."""
        return cute.make_tensor(
            sE.iterator + WEIGHT_ROWS,
            cute.make_layout((self.stage_tokens, 2), stride=(STAGE_PITCH, 1)),
        )

    @cute.jit
    def _row_info(self, row0, limit, tidx, mP2e, mRouter, scale, top_k: cutlass.Constexpr):
        """Finalize: (router weight * scale, token as fp32; -1 if not a valid row) of staged
        row ``tidx`` (threads below the stage's rows), loaded early so that the loads' latency
        hides behind the staging; (0, -1) for the other epilogues."""
        weight = cutlass.Float32(0.0)
        token = cutlass.Float32(-1.0)
        if cutlass.const_expr(self.epilogue == "finalize"):
            row = row0 + tidx
            if tidx < self.stage_tokens and row < limit:
                expanded = mP2e[row]
                if expanded >= 0:
                    weight = mRouter[expanded] * scale
                    token = cutlass.Float32(expanded // top_k)
        return weight, token

    @cute.jit
    def _stage_row_info(self, sE, tidx, info):
        """Writes ``_row_info``'s pair beside its row of the stage (finalize only)."""
        if cutlass.const_expr(self.epilogue == "finalize"):
            if tidx < self.stage_tokens:
                rows = self._row_info_view(sE)
                rows[tidx, 0] = info[0]
                rows[tidx, 1] = info[1]

    def _staged_scale(self, scale):
        """What the accumulators are multiplied by on their way to the stage: finalize
        scales the rows later, with the router weight."""
        return cutlass.Float32(1.0) if self.epilogue == "finalize" else scale

    @cute.jit
    def _write_staged(
        self, sE, scale, row0, limit, n_block, tidx, mC, mCsf, mGlobalSf, mP2e, mRouter, n,
        top_k,
    ):  # fmt: skip
        """The op's epilogue over the staged rows row0 .. (at most) row0 + stage tokens, once
        every consumer thread's accumulators are in ``sE``."""
        valid = limit - row0
        if valid > self.stage_tokens:
            valid = self.stage_tokens
        col0 = n_block * WEIGHT_ROWS
        if cutlass.const_expr(self.epilogue == "store"):
            epilogues.store_rows(sE, row0, valid, col0, mC, tidx, self.num_consumers)
        if cutlass.const_expr(self.epilogue == "swiglu"):
            epilogues.swiglu_quantize_rows(
                sE, mGlobalSf[0], row0, valid, n_block, WEIGHT_ROWS, tidx, self.num_consumers,
                mC, mCsf,
            )  # fmt: skip
        if cutlass.const_expr(self.epilogue == "finalize" and self.variant != "no_adds"):
            epilogues.finalize_rows(
                sE, self._row_info_view(sE), valid, col0, mC.iterator.toint(),
                cutlass.Int64(n * 2), tidx, self.num_consumers,
            )  # fmt: skip


class Nvfp4DecodeGemmSm90(WeightRowsGemm):
    """NVFP4 x NVFP4 contiguous grouped GEMM for few tokens per tile."""

    # Diagnostic builds for timing only (their results are wrong): "no_mma" skips the weights'
    # dequantisation and the MMAs, "no_tokens" the tokens' dequantisation.
    VARIANTS = ("", "no_mma", "no_tokens")

    def __init__(self, tactic: Tactic, *args, **kwargs):
        super().__init__(tactic, *args, **kwargs)
        self.token_frags = self.tokens // 8

    # ----------------------------------------------------------------------------------------
    @staticmethod
    def smem_bytes(tactic: Tactic) -> int:
        tokens = tactic.tile_mn[0]
        stage = (WEIGHT_ROWS + tokens) * KS // 2 + 2 * SF_STEP_WORDS * 4
        b_fragments = 2 * (tokens // 8) * STEPS * 32 * 8
        epilogue_stage = Nvfp4DecodeGemmSm90.epilogue_stage_bytes(tokens)
        return tactic.stages * stage + b_fragments + epilogue_stage + 1024

    @classmethod
    def can_implement(
        cls, tactic: Tactic, n: int, k: int, tile_size: int, epilogue: str = "store"
    ) -> tuple[bool, str]:
        """(ok, the first failed constraint with its values) for this tactic and problem."""
        tokens, rows = tactic.tile_mn
        smem = cls.smem_bytes(tactic)
        per_sm = tactic.ctas_per_sm
        checks = (
            (
                tactic.swap_ab and not tactic.fp16_operand,
                "the decode kernel runs swap_ab tactics without an fp16 operand (with the "
                "tokens in fp16 they run on the RS kernel, rs_gemm)",
            ),
            (
                tokens in TOKEN_CHOICES and rows == WEIGHT_ROWS,
                f"tile {tokens}x{rows} must be (8 | 32) tokens x {WEIGHT_ROWS} weight rows",
            ),
            (
                tactic.wg_split == "m" and not tactic.sparse_rows,
                "wg_split and sparse_rows are WGMMA-kernel knobs",
            ),
            *cls.shared_checks(tactic, n, epilogue, smem),
            (per_sm >= 1, f"ctas_per_sm is {per_sm}; it must be at least 1"),
            (
                per_sm * (smem + CTA_RESERVED_SMEM) <= SM_SMEM,
                f"{per_sm} CTAs per SM of {smem} B of shared memory (+{CTA_RESERVED_SMEM} each) "
                f"do not fit the SM's {SM_SMEM} B: at most "
                f"{SM_SMEM // (smem + CTA_RESERVED_SMEM)} do, or use fewer stages",
            ),
            (k % KS == 0, f"K={k} must be a multiple of {KS}"),
            (
                tile_size % SF_CHUNK_ROWS == 0,
                f"tile_size={tile_size} must be a multiple of {SF_CHUNK_ROWS}",
            ),
        )
        return first_failure(tactic, checks)

    # ----------------------------------------------------------------------------------------
    def _launch(self, operands, outputs, grid_ctas, n, tile_size, top_k, stream):
        """Launches the kernel on the global views GroupedGemmCall.__call__ made."""
        mA, mB, mAs, mBs = operands
        mC, epilogue_tensors, mAlpha, mGroup, mNumTiles = outputs
        atom = cute.nvgpu.warpgroup.make_smem_layout_atom(
            cute.nvgpu.warpgroup.SmemLayoutAtomKind.K_SW128, cutlass.Uint8
        )
        self.w_layout = cute.tile_to_shape(
            atom, (WEIGHT_ROWS, KS // 2, self.stages), order=(0, 1, 2)
        )
        self.t_layout = cute.tile_to_shape(
            atom, (self.tokens, KS // 2, self.stages), order=(0, 1, 2)
        )
        sf_one = cute.make_layout((128, 4, 1))
        g2s = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        tma_w, tma_mW = cute.nvgpu.cpasync.make_tiled_tma_atom(
            g2s, mB, cute.slice_(self.w_layout, (None, None, 0)), (WEIGHT_ROWS, KS // 2)
        )
        tma_t, tma_mT = cute.nvgpu.cpasync.make_tiled_tma_atom(
            g2s, mA, cute.slice_(self.t_layout, (None, None, 0)), (self.tokens, KS // 2)
        )
        tma_ws, tma_mWs = cute.nvgpu.cpasync.make_tiled_tma_atom(g2s, mBs, sf_one, (128, 4, 1))
        tma_ts, tma_mTs = cute.nvgpu.cpasync.make_tiled_tma_atom(g2s, mAs, sf_one, (128, 4, 1))
        self.tx_bytes = (WEIGHT_ROWS + self.tokens) * KS // 2 + 2 * SF_STEP_WORDS * 4

        @cute.struct
        class SharedStorage:
            ring_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            sW: cute.struct.Align[
                cute.struct.MemRange[cutlass.Uint8, cute.cosize(self.w_layout)], 1024
            ]
            sT: cute.struct.Align[
                cute.struct.MemRange[cutlass.Uint8, cute.cosize(self.t_layout)], 1024
            ]
            sWs: cute.struct.Align[
                cute.struct.MemRange[cutlass.Int32, SF_STEP_WORDS * self.stages], 128
            ]
            sTs: cute.struct.Align[
                cute.struct.MemRange[cutlass.Int32, SF_STEP_WORDS * self.stages], 128
            ]
            # mma.sync B fragments: [buffer][token fragment][k16 step][lane][2 words]
            sBf: cute.struct.Align[
                cute.struct.MemRange[cutlass.Uint32, 2 * self.token_frags * STEPS * 64], 128
            ]
            sE: self._epilogue_stage_field()

        self.shared_storage = SharedStorage

        kernel_call = self.kernel(
            (tma_w, tma_mW, tma_t, tma_mT, tma_ws, tma_mWs, tma_ts, tma_mTs),
            self.w_layout,
            self.t_layout,
            mC,
            epilogue_tensors,
            mAlpha,
            mGroup,
            mNumTiles,
            n,
            tile_size,
            top_k,
        )
        self._launch_persistent(kernel_call, grid_ctas, stream)

    # ----------------------------------------------------------------------------------------
    @cute.kernel
    def kernel(
        self,
        tma: tuple,  # (atom, tensor) for weights, tokens, weight scales, token scales
        w_layout: cute.ComposedLayout,  # staging ring of the packed weights (swizzled)
        t_layout: cute.ComposedLayout,  # and of the tokens
        mC: cute.Tensor,
        epilogue_tensors: tuple,  # (mCsf, mGlobalSf, mLimit, mP2e, mRouter, mWork)
        mAlpha: cute.Tensor,
        mGroup: cute.Tensor,
        mNumTiles: cute.Tensor,
        n: cutlass.Constexpr,
        tile_size: cutlass.Constexpr,
        top_k: cutlass.Constexpr,
    ):
        tma_w, mW, tma_t, mT, tma_ws, mWs, tma_ts, mTs = tma
        mCsf, mGlobalSf, mLimit, mP2e, mRouter, _ = epilogue_tensors
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == CONSUMER_WARPS:
            for atom in (tma_w, tma_t, tma_ws, tma_ts):
                cute.nvgpu.cpasync.prefetch_descriptor(atom)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        ring = self._ring(storage)

        sW = storage.sW.get_tensor(w_layout.outer, swizzle=w_layout.inner)
        sT = storage.sT.get_tensor(t_layout.outer, swizzle=t_layout.inner)
        sWs = storage.sWs.get_tensor(cute.make_layout((128, 4, 1, self.stages)))
        sTs = storage.sTs.get_tensor(cute.make_layout((128, 4, 1, self.stages)))

        gW = cute.local_tile(mW, (WEIGHT_ROWS, KS // 2), (None, None, None))  # (128,128,nb,ks,l)
        gT = cute.local_tile(mT, (self.tokens, KS // 2), (None, None))  # (tokens, 128, tg, ks)
        gWs = cute.local_tile(mWs, (128, 4, 1), (None, None, None, None))
        gTs = cute.local_tile(mTs, (128, 4, 1), (None, None, None))
        one = cute.make_layout(1)
        tWsW, tWgW = cute.nvgpu.cpasync.tma_partition(
            tma_w, 0, one, cute.group_modes(sW, 0, 2), cute.group_modes(gW, 0, 2)
        )
        tTsT, tTgT = cute.nvgpu.cpasync.tma_partition(
            tma_t, 0, one, cute.group_modes(sT, 0, 2), cute.group_modes(gT, 0, 2)
        )
        tWsWs, tWgWs = cute.nvgpu.cpasync.tma_partition(
            tma_ws, 0, one, cute.group_modes(sWs, 0, 3), cute.group_modes(gWs, 0, 3)
        )
        tTsTs, tTgTs = cute.nvgpu.cpasync.tma_partition(
            tma_ts, 0, one, cute.group_modes(sTs, 0, 3), cute.group_modes(gTs, 0, 3)
        )

        k_steps = cute.size(gW, mode=[3])
        n_blocks = n // WEIGHT_ROWS
        num_tiles = mNumTiles[0]

        pipeline_init_wait(cluster_shape_mn=(1, 1))
        if warp_idx == CONSUMER_WARPS:
            loads = (
                (tma_w, tWgW, tWsW), (tma_t, tTgT, tTsT), (tma_ws, tWgWs, tWsWs),
                (tma_ts, tTgTs, tTsTs),
            )  # fmt: skip
            self._produce(
                ring, loads, k_steps, n_blocks, num_tiles, bidx, gdim, tile_size, mLimit, mGroup
            )

        if warp_idx < CONSUMER_WARPS:
            self._consume(
                storage, ring, k_steps, n_blocks, num_tiles, tidx, bidx, gdim,
                mC, mCsf, mGlobalSf, mLimit, mP2e, mRouter, mAlpha, mGroup, n, tile_size, top_k,
            )  # fmt: skip

    def _issue_loads(self, loads, s, bar, n_block, ks, expert, row0):
        """K step ``ks`` of the item's packed weights, tokens and their scales into stage s."""
        coords = (
            (n_block, ks, expert),
            (row0 // self.tokens, ks),
            (0, ks, n_block, expert),
            (0, ks, row0 // SF_CHUNK_ROWS),
        )
        for (atom, gX, sX), coord in zip(loads, coords, strict=True):
            cute.copy(atom, gX[(None, *coord)], sX[(None, s)], tma_bar_ptr=bar)

    @cute.jit
    def _consume(
        self, storage, ring, k_steps, n_blocks, num_tiles, tidx, bidx, gdim,
        mC, mCsf, mGlobalSf, mLimit, mP2e, mRouter, mAlpha, mGroup, n, tile_size, top_k,
    ):  # fmt: skip
        """The consumer warps' loop over their work items: K steps, then the epilogue."""
        warp = cute.arch.make_warp_uniform(tidx // 32)
        lane = tidx % 32
        g = lane // 4
        q = lane % 4
        nf = self.token_frags
        sW32 = self._words(storage.sW.data_ptr(), WEIGHT_ROWS * ROW_WORDS * self.stages)
        sT32 = self._words(storage.sT.data_ptr(), self.tokens * ROW_WORDS * self.stages)
        sWs = storage.sWs.get_tensor(cute.make_layout(SF_STEP_WORDS * self.stages))
        sTs = storage.sTs.get_tensor(cute.make_layout(SF_STEP_WORDS * self.stages))
        sBf = storage.sBf.get_tensor(cute.make_layout(2 * nf * STEPS * 64))
        sE = self._epilogue_stage(storage)
        barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=self.num_consumers)
        acc = cute.make_rmem_tensor((nf * 4,), cutlass.Float32)
        # This thread's weight rows (g and g + 8 of the warp's 16) and, for the warps that
        # dequantise tokens, its token (fragment warp // 2, row g) and 16-byte chunk half.
        w_row = 16 * warp + g
        b_frag = warp // 2
        b_half = warp % 2

        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        step = cutlass.Int32(0)
        total_work = self._total_work(num_tiles, n_blocks, tile_size)  # items of one tile
        for work in cutlass.range(bidx, total_work, gdim, unroll=1):
            n_block = work % n_blocks
            tile, tile_row0, limit = self._span(work // n_blocks, 0, 0, tile_size, mLimit)
            expert = mGroup[tile]
            for row0 in cutlass.range(tile_row0, limit, self.tokens, unroll=1):
                scale = mAlpha[expert] * OPERAND_UNSCALE
                # finalize: the loads of the rows' weights and tokens hide behind the K loop
                info = self._row_info(row0, limit, tidx, mP2e, mRouter, scale, top_k)
                acc.fill(0.0)
                for _ks in cutlass.range(k_steps, unroll=1):
                    ring.consumer_wait(read)
                    s = read.index
                    buf = step % 2
                    packed, sf_words = [], []
                    for r2 in cutlass.range_constexpr(2):
                        row = w_row + 8 * r2
                        halves = []
                        for cc in cutlass.range_constexpr(2):
                            # Chunk 2q + cc of the row sits at (2q + cc) ^ (row % 8), row % 8 = g.
                            word = (s * WEIGHT_ROWS + row) * ROW_WORDS + ((2 * q + cc) ^ g) * 4
                            halves.append(self._load(sW32, word, 4))
                        packed.append(halves)
                        sf_words.append(cutlass.Uint32(sWs[self._sf_word(s, q, row)]))
                    if cutlass.const_expr(self.variant != "no_tokens"):
                        if b_frag < nf:
                            self._dequant_tokens(
                                sT32, sTs, sBf, s, buf, b_frag, b_half, row0 % SF_CHUNK_ROWS, g,
                                q, lane,
                            )  # fmt: skip
                    barrier.arrive_and_wait()
                    ring.consumer_release(read)
                    read.advance()
                    if cutlass.const_expr(self.variant != "no_mma"):
                        self._mma_step(packed, sf_words, sBf, buf, acc, lane)
                    step += 1
                scale_staged = self._staged_scale(scale)
                for f in cutlass.range_constexpr(nf):
                    for i in cutlass.range_constexpr(4):
                        sE[8 * f + 2 * q + i % 2, w_row + 8 * (i // 2)] = (
                            acc[4 * f + i] * scale_staged
                        )
                self._stage_row_info(sE, tidx, info)
                barrier.arrive_and_wait()
                self._write_staged(
                    sE, scale, row0, limit, n_block, tidx, mC, mCsf, mGlobalSf, mP2e, mRouter,
                    n, top_k,
                )  # fmt: skip

    # ----------------------------------------------------------------------------------------
    @staticmethod
    def _words(ptr, count):
        """A flat uint32 view of ``count`` words of shared memory at ``ptr`` (no swizzle)."""
        return cute.make_tensor(cute.recast_ptr(ptr, dtype=cutlass.Uint32), cute.make_layout(count))

    @staticmethod
    def _load(words, first, count):
        """``count`` consecutive words from ``first`` (a multiple of ``count``): one vector load."""
        regs = cute.make_rmem_tensor((count,), cutlass.Uint32)
        cute.autovec_copy(cute.local_tile(words, (count,), (first // count,)), regs)
        return regs

    @staticmethod
    def _sf_word(s, chunk, row):
        """Index of the scale word (4 e4m3 blocks) of ``row`` in K chunk ``chunk`` of stage s."""
        return s * SF_STEP_WORDS + chunk * 128 + (row % 32) * 4 + (row % 128) // 32

    def _dequant_tokens(self, sT32, sTs, sBf, s, buf, b_frag, b_half, sf_row0, g, q, lane):
        """One (token, 16-byte chunk) of stage s into mma.sync B fragments in ``sBf[buf]``.

        Thread (g, q) of warp 2 f + h takes token 8 f + g, chunk 2 q + h: the values the lanes
        (g, q) of every warp multiply in k16 steps 8 h .. 8 h + 7 against their weight rows.
        """
        t = 8 * b_frag + g
        word = (s * self.tokens + t) * ROW_WORDS + ((2 * q + b_half) ^ g) * 4
        packed = self._load(sT32, word, 4)
        sf_half = cutlass.Uint32(sTs[self._sf_word(s, q, sf_row0 + t)]) >> (16 * b_half)
        scales = (e4m3_to_f16x2(sf_half), e4m3_to_f16x2(sf_half >> 8))
        for j in range(4):  # unrolled at trace time
            pairs = e2m1x8_to_f16x8(packed[j], scales[j // 2])
            for sub in range(2):
                first = self._b_index(buf, b_frag, 8 * b_half + 2 * j + sub, lane)
                frag = cute.make_rmem_tensor((2,), cutlass.Uint32)
                frag[0] = pairs[2 * sub]
                frag[1] = pairs[2 * sub + 1]
                cute.autovec_copy(frag, cute.local_tile(sBf, (2,), (first // 2,)))

    def _b_index(self, buf, frag, k_step, lane):
        return ((buf * self.token_frags + frag) * STEPS + k_step) * 64 + lane * 2

    def _mma_step(self, packed, sf_words, sBf, buf, acc, lane):
        """The 16 k16 steps of one K step: weights dequantised into A fragments (rows g and
        g + 8), times every token fragment's B from ``sBf[buf]``, into ``acc``."""
        for cc in range(2):  # unrolled at trace time
            scales = [
                (e4m3_to_f16x2(w >> (16 * cc)), e4m3_to_f16x2(w >> (16 * cc + 8))) for w in sf_words
            ]
            for j in range(4):
                rows = [e2m1x8_to_f16x8(packed[r2][cc][j], scales[r2][j // 2]) for r2 in range(2)]
                for sub in range(2):
                    a = (
                        rows[0][2 * sub],
                        rows[1][2 * sub],
                        rows[0][2 * sub + 1],
                        rows[1][2 * sub + 1],
                    )
                    for f in range(self.token_frags):
                        first = self._b_index(buf, f, 8 * cc + 2 * j + sub, lane)
                        b = self._load(sBf, first, 2)
                        d = mma_f16_m16n8k16(a, (b[0], b[1]), [acc[4 * f + i] for i in range(4)])
                        for i in range(4):
                            acc[4 * f + i] = d[i]
