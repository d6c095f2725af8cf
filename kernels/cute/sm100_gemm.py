"""NVFP4 grouped GEMMs for Blackwell (sm_100a) with tcgen05 block-scaled MMA, CuTe DSL 4.3.5.

Compiled, not run on hardware: the only GPU this project has is an H200 (sm_90), so this kernel
is built for sm_100a in CI (`bot kernels build --arch sm_100a --all-tactics`, PTX checked for
``tcgen05.mma`` with ``kind::mxf4nvf4``) and never selected by ``auto``: only the
``cute-sm100`` backend runs it, and that backend refuses every call, saying so, until the
kernel has passed its checks on a B200 (``backend_sm100.GPU_VERIFIED``).

On Blackwell NVFP4 is native: the MMA reads the packed e2m1 operands and their e4m3 block
scales (one per 16 values, the same 128x4 swizzled chunks the ops take) itself, so nothing is
dequantised. Same op API, table walk and epilogues as the Hopper kernels:

Pipeline (persistent, one CTA per SM, warp-specialised, six warps):
1. TMA warp (warp 5): per work item (a table tile's 128 tokens, 128 weight rows of its expert)
   and 256-wide K step, loads the tokens' and the weights' packed tiles and their scale chunks
   into a ``stages``-deep ring.
2. MMA warp (warp 4): copies the stage's scales from shared to tensor memory (tcgen05.cp), then
   issues the K step's four k64 block-scaled MMAs (tcgen05.mma kind::mxf4nvf4, 128 x 128, fp32
   accumulators in tensor memory), frees the stage when they are done, and hands the finished
   accumulator to the epilogue.
3. Four epilogue warps: load the accumulator from tensor memory (thread = row), times alpha,
   into the fp32 stage [tokens, 128] in shared memory, then the op's epilogue from it, as the
   Hopper weight-rows kernels do (stagebot.kernels.cute.decode_gemm.WeightRowsGemm): bf16 / fp32
   rows, SwiGLU + NVFP4, or finalize atomics.
"""

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.blackwell_helpers as sm100_utils
import cutlass.utils.blockscaled_layout as blockscaled_utils
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait

from stagebot.kernels.cute.decode_gemm import WEIGHT_ROWS, WeightRowsGemm
from stagebot.kernels.cute.grouped_gemm import SF_CHUNK_ROWS, first_failure
from stagebot.kernels.cute.tactics import Tactic

SF_VEC = 16  # values per e4m3 block scale (NVFP4)
MMA_K = 64  # K of one kind::mxf4nvf4 MMA
KS = 4 * MMA_K  # fp4 values per K step (ring stage)
TOKENS = 128  # tokens per work item: the MMA's M
EPILOGUE_WARPS = 4
MMA_WARP, TMA_WARP = 4, 5
TMEM_COLUMNS = 256  # 128 accumulator columns + 16 + 16 scale columns, allocated as a power of 2


class Nvfp4BlockScaledGemmSm100(WeightRowsGemm):
    """NVFP4 x NVFP4 contiguous grouped GEMM, tcgen05 block-scaled MMA (tokens x weight rows)."""

    def __init__(self, tactic: Tactic, *args, **kwargs):
        super().__init__(tactic, *args, **kwargs)
        self.num_consumers = EPILOGUE_WARPS * 32  # the threads of the op's epilogue
        self.threads_per_cta = (EPILOGUE_WARPS + 2) * 32

    @staticmethod
    def smem_bytes(tactic: Tactic) -> int:
        stage = 2 * (TOKENS * KS // 2 + TOKENS * KS // SF_VEC)  # A and B: codes and scales
        epilogue_stage = Nvfp4BlockScaledGemmSm100.epilogue_stage_bytes(TOKENS)
        return tactic.stages * stage + epilogue_stage + 1024

    @classmethod
    def can_implement(
        cls, tactic: Tactic, n: int, k: int, tile_size: int, epilogue: str = "store"
    ) -> tuple[bool, str]:
        """(ok, the first failed constraint with its values) for this tactic and problem."""
        checks = (
            (tactic.blockscaled, "the sm_100a kernel runs blockscaled tactics only"),
            (
                tuple(tactic.tile_mn) == (TOKENS, WEIGHT_ROWS),
                f"tile {tactic.tile_mn[0]}x{tactic.tile_mn[1]} must be {TOKENS} tokens x "
                f"{WEIGHT_ROWS} weight rows",
            ),
            (
                not (tactic.swap_ab or tactic.sparse_rows or tactic.fp16_operand)
                and tactic.wg_split == "m"
                and tactic.ctas_per_sm == 1,
                "swap_ab, sparse_rows, fp16_operand, wg_split and ctas_per_sm are Hopper knobs",
            ),
            *cls.shared_checks(tactic, n, epilogue, cls.smem_bytes(tactic)),
            (k % KS == 0, f"K={k} must be a multiple of {KS}"),
            (
                tile_size % SF_CHUNK_ROWS == 0,
                f"tile_size={tile_size} must be a multiple of {SF_CHUNK_ROWS}",
            ),
        )
        return first_failure(tactic, checks)

    # ----------------------------------------------------------------------------------------
    def _launch(self, operands, outputs, grid_ctas, n, tile_size, top_k, stream):
        """Launches the kernel on views of the raw operands: e2m1 codes (m, k, 1) and
        (n, k, experts), K-major, and their e4m3 scales in the block-scaled MMA's atom layout,
        which is the ops' 128x4 swizzled one."""
        mA8, mB8, mAs32, mBs32 = operands
        mC, epilogue_tensors, mAlpha, mGroup, mNumTiles = outputs
        m, experts = mA8.shape[0], mB8.shape[2]
        k = 2 * mA8.shape[1]
        fp4, sf = cutlass.Float4E2M1FN, cutlass.Float8E4M3FN
        a_shape, b_shape = (m, k, 1), (n, k, experts)
        mA = cute.make_tensor(
            cute.recast_ptr(mA8.iterator, dtype=fp4), cute.make_ordered_layout(a_shape, (1, 0, 2))
        )
        mB = cute.make_tensor(
            cute.recast_ptr(mB8.iterator, dtype=fp4), cute.make_ordered_layout(b_shape, (1, 0, 2))
        )
        mAs = cute.make_tensor(
            cute.recast_ptr(mAs32.iterator, dtype=sf),
            blockscaled_utils.tile_atom_to_shape_SF(a_shape, SF_VEC),
        )
        mBs = cute.make_tensor(
            cute.recast_ptr(mBs32.iterator, dtype=sf),
            blockscaled_utils.tile_atom_to_shape_SF(b_shape, SF_VEC),
        )
        k_major = tcgen05.OperandMajorMode.K
        tiled_mma = sm100_utils.make_blockscaled_trivial_tiled_mma(
            fp4, k_major, k_major, sf, SF_VEC, tcgen05.CtaGroup.ONE, (TOKENS, WEIGHT_ROWS)
        )
        mma_tiler = (TOKENS, WEIGHT_ROWS, KS)
        layouts = (
            sm100_utils.make_smem_layout_a(tiled_mma, mma_tiler, fp4, self.stages),
            sm100_utils.make_smem_layout_b(tiled_mma, mma_tiler, fp4, self.stages),
            blockscaled_utils.make_smem_layout_sfa(tiled_mma, mma_tiler, SF_VEC, self.stages),
            blockscaled_utils.make_smem_layout_sfb(tiled_mma, mma_tiler, SF_VEC, self.stages),
        )
        cluster_vmnk = cute.tiled_divide(cute.make_layout((1, 1, 1)), (tiled_mma.thr_id.shape,))
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        tmas = []
        for tensor, layout, is_a, is_sf in zip(
            (mA, mB, mAs, mBs),
            layouts,
            (True, False, True, False),
            (False, False, True, True),
            strict=True,
        ):
            make = cute.nvgpu.make_tiled_tma_atom_A if is_a else cute.nvgpu.make_tiled_tma_atom_B
            extra = {"internal_type": cutlass.Int16} if is_sf else {}
            one_stage = cute.slice_(layout, (None, None, None, 0))
            tmas.append(
                make(g2s, tensor, one_stage, mma_tiler, tiled_mma, cluster_vmnk.shape, **extra)
            )
        self.tx_bytes = sum(
            cute.size_in_bytes(dtype, cute.slice_(layout, (None, None, None, 0)))
            for dtype, layout in zip((fp4, fp4, sf, sf), layouts, strict=True)
        )

        @cute.struct
        class SharedStorage:
            ring_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            acc_barriers: cute.struct.MemRange[cutlass.Int64, 2]
            tmem_holding: cutlass.Int32
            sA: cute.struct.Align[cute.struct.MemRange[fp4, cute.cosize(layouts[0].outer)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[fp4, cute.cosize(layouts[1].outer)], 1024]
            sAs: cute.struct.Align[cute.struct.MemRange[sf, cute.cosize(layouts[2])], 1024]
            sBs: cute.struct.Align[cute.struct.MemRange[sf, cute.cosize(layouts[3])], 1024]
            sE: self._epilogue_stage_field()

        self.shared_storage = SharedStorage
        kernel_call = self.kernel(
            tiled_mma, tuple(tmas), layouts, cluster_vmnk, mC, epilogue_tensors, mAlpha, mGroup,
            mNumTiles, n, tile_size, top_k,
        )  # fmt: skip
        self._launch_persistent(kernel_call, grid_ctas, stream)

    # ----------------------------------------------------------------------------------------
    @cute.kernel
    def kernel(
        self,
        tiled_mma: cute.TiledMma,
        tmas: tuple,  # (atom, tensor) for the tokens, the weights, then their scales
        layouts: tuple,  # the ring's shared-memory layouts, same order
        cluster_vmnk: cute.Layout,
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
        if warp_idx == TMA_WARP:
            for atom, _ in tmas:
                cpasync.prefetch_descriptor(atom)

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        ring = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.ring_barriers.data_ptr(),
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1),
            tx_count=self.tx_bytes,
            cta_layout_vmnk=cluster_vmnk,
            defer_sync=True,
        )
        acc_ready = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.acc_barriers.data_ptr(),
            num_stages=1,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_consumers),
            cta_layout_vmnk=cluster_vmnk,
            defer_sync=True,
        )
        tmem = utils.TmemAllocator(
            storage.tmem_holding,
            barrier_for_retrieve=pipeline.NamedBarrier(
                barrier_id=2, num_threads=self.num_consumers + 32
            ),
            allocator_warp_id=0,
        )
        pipeline_init_arrive(cluster_shape_mn=(1, 1), is_relaxed=True)

        sA = storage.sA.get_tensor(layouts[0].outer, swizzle=layouts[0].inner)
        sB = storage.sB.get_tensor(layouts[1].outer, swizzle=layouts[1].inner)
        sAs = storage.sAs.get_tensor(layouts[2])
        sBs = storage.sBs.get_tensor(layouts[3])
        thr_mma = tiled_mma.get_slice(0)
        tiler_a = (TOKENS, KS)
        tiler_b = (WEIGHT_ROWS, KS)
        # (tile, k step[, expert]) -> TMA source; ring stage -> TMA destination.
        loads = []
        for (atom, mX), sX, tiler, is_a, is_sf in zip(
            tmas, (sA, sB, sAs, sBs), (tiler_a, tiler_b, tiler_a, tiler_b),
            (True, False, True, False), (False, False, True, True), strict=True,
        ):  # fmt: skip
            gX = cute.local_tile(mX, tiler, (None, None, None))
            tCgX = thr_mma.partition_A(gX) if is_a else thr_mma.partition_B(gX)
            sX_part, gX_part = cpasync.tma_partition(
                atom, 0, cute.make_layout(1), cute.group_modes(sX, 0, 3),
                cute.group_modes(tCgX, 0, 3),
            )  # fmt: skip
            if cutlass.const_expr(is_sf):
                sX_part, gX_part = cute.filter_zeros(sX_part), cute.filter_zeros(gX_part)
            loads.append((atom, gX_part, sX_part, is_a))

        acc_shape = tiled_mma.partition_shape_C((TOKENS, WEIGHT_ROWS))
        acc_layout = tiled_mma.make_fragment_C(acc_shape).layout
        k_steps = k_steps_of(loads[0][1])
        n_blocks = n // WEIGHT_ROWS
        num_tiles = mNumTiles[0]
        pipeline_init_wait(cluster_shape_mn=(1, 1))

        if warp_idx == TMA_WARP:
            self._produce(
                ring, loads, k_steps, n_blocks, num_tiles, bidx, gdim, tile_size,
                epilogue_tensors[2], mGroup,
            )  # fmt: skip
        if warp_idx == MMA_WARP:
            tmem.wait_for_alloc()
            acc = cute.make_tensor(tmem.retrieve_ptr(cutlass.Float32), acc_layout)
            self._mma(
                tiled_mma, ring, acc_ready, acc, sA, sB, sAs, sBs, layouts, k_steps, n_blocks,
                num_tiles, bidx, gdim, tile_size, epilogue_tensors[2], mGroup,
            )  # fmt: skip
        if warp_idx < EPILOGUE_WARPS:
            tmem.allocate(TMEM_COLUMNS)
            tmem.wait_for_alloc()
            acc_ptr = tmem.retrieve_ptr(cutlass.Float32)
            self._epilogue(
                acc_ready, cute.make_tensor(acc_ptr, acc_layout), storage, tidx, n_blocks,
                num_tiles, bidx, gdim, tile_size, mC, epilogue_tensors, mAlpha, mGroup, n, top_k,
            )  # fmt: skip
            tmem.relinquish_alloc_permit()
            pipeline.NamedBarrier(barrier_id=1, num_threads=self.num_consumers).arrive_and_wait()
            tmem.free(acc_ptr)

    def _issue_loads(self, loads, s, bar, n_block, kk, expert, row0):
        """K step ``kk`` of the item's tokens, weights and both scale chunks into stage s."""
        for atom, gX, sX, is_a in loads:
            src = gX[(None, row0 // TOKENS, kk, 0)] if is_a else gX[(None, n_block, kk, expert)]
            cute.copy(atom, src, sX[(None, s)], tma_bar_ptr=bar)

    # ----------------------------------------------------------------------------------------
    @cute.jit
    def _mma(
        self, tiled_mma, ring, acc_ready, acc, sA, sB, sAs, sBs, layouts, k_steps, n_blocks,
        num_tiles, bidx, gdim, tile_size, mLimit, mGroup,
    ):  # fmt: skip
        """The MMA warp: per work item and token group, the K steps' scales into tensor memory
        and their block-scaled MMAs into the accumulator, then the accumulator to the
        epilogue (which frees it when it has read it)."""
        sf_ptr = acc.iterator + WEIGHT_ROWS  # scale columns follow the accumulator's
        mma_tiler = (TOKENS, WEIGHT_ROWS, KS)
        tAs_layout = blockscaled_utils.make_tmem_layout_sfa(
            tiled_mma, mma_tiler, SF_VEC, cute.slice_(layouts[2], (None, None, None, 0))
        )
        tBs_layout = blockscaled_utils.make_tmem_layout_sfb(
            tiled_mma, mma_tiler, SF_VEC, cute.slice_(layouts[3], (None, None, None, 0))
        )
        sf = cutlass.Float8E4M3FN
        tAs = cute.make_tensor(cute.recast_ptr(sf_ptr, dtype=sf), tAs_layout)
        tBs = cute.make_tensor(cute.recast_ptr(sf_ptr + SF_TMEM_COLUMNS, dtype=sf), tBs_layout)
        a_copy, sAs_s2t, tAs_s2t = scale_copy(sAs, tAs)
        b_copy, sBs_s2t, tBs_s2t = scale_copy(sBs, tBs)
        tCrA = tiled_mma.make_fragment_A(sA)
        tCrB = tiled_mma.make_fragment_B(sB)
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        handed = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        total_work = self._total_work(num_tiles, n_blocks, tile_size)
        for work in cutlass.range(bidx, total_work, gdim, unroll=1):
            _, tile_row0, limit = self._span(work // n_blocks, 0, 0, tile_size, mLimit)
            for _row0 in cutlass.range(tile_row0, limit, TOKENS, unroll=1):
                acc_ready.producer_acquire(handed)  # the epilogue has read the last one
                tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
                for _kk in cutlass.range(k_steps, unroll=1):
                    ring.consumer_wait(read)
                    s = read.index
                    cute.copy(a_copy, sAs_s2t[(None, None, None, None, s)], tAs_s2t)
                    cute.copy(b_copy, sBs_s2t[(None, None, None, None, s)], tBs_s2t)
                    for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
                        tiled_mma.set(tcgen05.Field.SFA, tAs[(None, None, kb)].iterator)
                        tiled_mma.set(tcgen05.Field.SFB, tBs[(None, None, kb)].iterator)
                        cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, s)],
                                  tCrB[(None, None, kb, s)], acc)  # fmt: skip
                        tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
                    ring.consumer_release(read)  # when these MMAs are done
                    read.advance()
                acc_ready.producer_commit(handed)
                handed.advance()
        acc_ready.producer_tail(handed)

    @cute.jit
    def _epilogue(
        self, acc_ready, acc, storage, tidx, n_blocks, num_tiles, bidx, gdim, tile_size, mC,
        epilogue_tensors, mAlpha, mGroup, n, top_k,
    ):  # fmt: skip
        """The epilogue warps: per work item and token group, the accumulator (thread = token
        row) times alpha into the fp32 stage, then the op's epilogue from the stage."""
        mCsf, mGlobalSf, mLimit, mP2e, mRouter, _ = epilogue_tensors
        sE = self._epilogue_stage(storage)
        barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=self.num_consumers)
        load = cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x128), cutlass.Float32)
        acc_tile = acc[((None, None), 0, 0)]
        loader = tcgen05.make_tmem_copy(load, acc_tile)
        thr_load = loader.get_slice(tidx)
        tTR_acc = thr_load.partition_S(acc_tile)
        tTR_coord = thr_load.partition_D(cute.make_identity_tensor((TOKENS, WEIGHT_ROWS)))
        values = cute.make_rmem_tensor(tTR_coord.shape, cutlass.Float32)
        got = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        total_work = self._total_work(num_tiles, n_blocks, tile_size)
        for work in cutlass.range(bidx, total_work, gdim, unroll=1):
            n_block = work % n_blocks
            tile, tile_row0, limit = self._span(work // n_blocks, 0, 0, tile_size, mLimit)
            scale = mAlpha[mGroup[tile]]
            scale_staged = self._staged_scale(scale)
            for row0 in cutlass.range(tile_row0, limit, TOKENS, unroll=1):
                acc_ready.consumer_wait(got)
                cute.copy(loader, tTR_acc, values)
                cute.arch.fence_view_async_tmem_load()
                acc_ready.consumer_release(got)
                got.advance()
                barrier.arrive_and_wait()  # the previous epilogue has read the stage
                for i in cutlass.range_constexpr(cute.size(values)):
                    token, col = tTR_coord[i]
                    sE[token, col] = values[i] * scale_staged
                info = self._row_info(row0, limit, tidx, mP2e, mRouter, scale, top_k)
                self._stage_row_info(sE, tidx, info)
                barrier.arrive_and_wait()
                self._write_staged(
                    sE, scale, row0, limit, n_block, tidx, mC, mCsf, mGlobalSf, mP2e, mRouter,
                    n, top_k,
                )  # fmt: skip


SF_TMEM_COLUMNS = (TOKENS // 32) * (KS // MMA_K)  # one K step's scales of 128 rows


def k_steps_of(g_part):
    """K steps of a partitioned global operand ((atom, rest), tiles, k steps, batches)."""
    return cute.size(g_part, mode=[2])


def scale_copy(s_scales, t_scales):
    """(tiled copy, smem source, tmem destination) of one operand's block scales: tcgen05.cp
    of 4 x 32 rows x 128 bits per copy, shared -> tensor memory."""
    t_compact = cute.filter_zeros(t_scales)
    atom = cute.make_copy_atom(tcgen05.Cp4x32x128bOp(tcgen05.CtaGroup.ONE), cutlass.Float8E4M3FN)
    tiled = tcgen05.make_s2t_copy(atom, t_compact)
    thr = tiled.get_slice(0)
    source = tcgen05.get_s2t_smem_desc_tensor(tiled, thr.partition_S(cute.filter_zeros(s_scales)))
    return tiled, source, thr.partition_D(t_compact)
