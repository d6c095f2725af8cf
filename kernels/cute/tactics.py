"""Tactics of the Hopper NVFP4 grouped GEMM: what the constructor of a kernel class takes.

Plain data, no cutlass import, so the dispatcher and the CLI can list them cheaply. Each
constraint is stated once, in the kernel class's ``is_valid_*`` predicates.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Tactic:
    tile_mn: tuple[int, int] = (128, 128)  # CTA tile (rows of the permuted activations, columns)
    cluster_mn: tuple[int, int] = (1, 1)
    stages: int = 4  # depth of the TMA pipeline of packed FP4 + scales
    # How the two MMA warpgroups share the CTA tile: "m" = 64 rows x all columns each (B read
    # by both), "n" = all rows x half the columns each (A read by both; fewer smem bytes).
    # "n" passed gpu_check but measured 3-5% slower (NOTES.md v2), so no listed tactic uses it.
    wg_split: str = "m"
    # Decode tiles: when every row the second warpgroup multiplies lies past the tile's
    # mn_limit, it skips its WGMMAs and takes over part of the first's B dequantisation, so
    # the first warpgroup (A, a quarter of B, the WGMMAs) is no longer the slowest; the SwiGLU
    # epilogue of a tile with at most 32 valid rows quantises them from shared memory on every
    # thread (epilogues.swiglu_quantize_staged). Only calls that pass tile_idx_to_mn_limit can
    # tell; without it the tactic runs dense.
    sparse_rows: bool = False
    # The weights are the MMA's M operand, dequantised into registers, and tile_mn is (tokens
    # per work item, weight rows): the decode kernel (stagebot.kernels.cute.decode_gemm), or
    # with fp16_operand "a" the RS kernel (stagebot.kernels.cute.rs_gemm).
    swap_ab: bool = False
    # CTAs resident per SM (the grid is this many per SM): the decode kernel's eight consumer
    # warps alone leave its dequantisation latency-bound; two CTAs of half the stages took 13-21%
    # less time on the H200 (NOTES.md, fifth session). The WGMMA kernel takes 1.
    ctas_per_sm: int = 1
    # "a" or "b" is dequantised once per call into fp16 (triton nvfp4_operand) and loaded by
    # TMA straight into WGMMA's layout; only the other operand is dequantised per tile (for the
    # RS kernel, swap_ab: "a", the tokens). Worth it where that operand is re-read by many
    # tiles: the weights at S1 (rows / 128 tiles) and Mixtral's T8192 layer; the tokens
    # (n / 256 tiles) at the first layer's T8192 (NOTES.md, eighth session).
    fp16_operand: str = ""
    # Blackwell (sm_100a): tcgen05 block-scaled MMA on the packed NVFP4 operands
    # (stagebot.kernels.cute.sm100_gemm). Compiled, not run on hardware: only the cute-sm100
    # backend runs it, never "auto" on any GPU here.
    blockscaled: bool = False

    def __str__(self) -> str:
        (tm, tn), (cm, cn) = self.tile_mn, self.cluster_mn
        split = "" if self.wg_split == "m" else f"_wg{self.wg_split}"
        sparse = "_sparse" if self.sparse_rows else ""
        swap = "_swapab" if self.swap_ab else ""
        per_sm = f"_{self.ctas_per_sm}ctas" if self.ctas_per_sm != 1 else ""
        fp16 = f"_{self.fp16_operand}16" if self.fp16_operand else ""
        sm100 = "_sm100" if self.blockscaled else ""
        return (
            f"tile{tm}x{tn}_cluster{cm}x{cn}_stages{self.stages}{split}{sparse}{swap}{per_sm}{fp16}"
            f"{sm100}"
        )


def effective(tactic: Tactic, reads_limit: bool) -> Tactic:
    """The tactic a launch really runs: sparse_rows needs the tile limits, else it is dense."""
    return tactic if reads_limit or not tactic.sparse_rows else replace(tactic, sparse_rows=False)


# The dispatcher's list, in order of preference; the first one is what CI compiles.
TACTICS: tuple[Tactic, ...] = (
    Tactic((128, 256), (1, 1), 4),  # fastest measured (NOTES.md); needs n % 256 == 0
    Tactic((128, 128), (1, 1), 4),  # the fallback for n % 256 == 128
    Tactic((128, 128), (1, 1), 6),
    Tactic((128, 256), (1, 1), 4, fp16_operand="b"),  # many rows per expert: weights once
    Tactic((128, 256), (1, 1), 4, fp16_operand="a"),  # many tiles per row: tokens once
    # Weights from registers (the RS kernel): most 8192-token GEMMs, 9-19% faster than a16 on
    # the first layer's GEMM2 (NOTES.md, ninth session).
    Tactic((128, 128), (1, 1), 6, swap_ab=True, fp16_operand="a"),
    # The RS kernel with 256 tokens per work item (two table tiles of one expert): half the
    # weights' dequantisation per MAC; 4 stages fit beside the epilogue's 128-token stage.
    Tactic((256, 128), (1, 1), 4, swap_ab=True, fp16_operand="a"),
    Tactic((128, 256), (1, 1), 4, sparse_rows=True),  # decode: one expert's few rows per tile
    Tactic((8, 128), (1, 1), 4, swap_ab=True, ctas_per_sm=2),  # decode: <= 8 tokens per expert
    Tactic((32, 128), (1, 1), 2, swap_ab=True, ctas_per_sm=2),  # decode: <= 32 tokens per expert
)
DEFAULT_TACTIC = TACTICS[0]
# The Blackwell list (the cute-sm100 backend's; never in TACTICS, so the Hopper dispatcher,
# its autotuner and the suite's pins never see it).
SM100_TACTICS: tuple[Tactic, ...] = (Tactic((128, 128), (1, 1), 4, blockscaled=True),)
