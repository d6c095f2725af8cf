"""The suite's case matrix and its inputs: weights built once per scale, routing per case.

Inputs are built with the op API (quantise, interleave, swizzle): they are what a checkpoint
loader would hand the ops. The oracle reads the same bytes with its own decoders.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cached_property

import pytest
import torch

from stagebot.harness.suites.nvfp4_moe.oracle import MoeOracle
from stagebot.kernels import ops
from stagebot.kernels.moe_tables import MoeSortTables

FP4_RANGE = 448.0 * 6.0  # global scale = FP4_RANGE / amax
ACTIVATION_AMAX = 8.0  # static calibration of the fc1 input (x ~ N(0, 1))
SWIGLU_AMAX = 32.0  # static calibration of the fc2 input (linear * silu(gate))
TILE_SIZES = (128, 256)
TOP_KS = (1, 2, 8)
NO_GPU = "needs a CUDA GPU (torch.cuda.is_available() is False); the cpu cases cover the op here"


@dataclass(frozen=True)
class Scale:
    device: str
    num_experts: int
    hidden: int
    intermediate: int
    tokens: tuple[int, ...]
    ep_sizes: tuple[int, ...]
    oracle_tokens: int  # the oracle checks this many tokens of a case, plus tile-covering ones


CPU = Scale("cpu", 16, 256, 512, (1, 128, 515), (1, 8), oracle_tokens=48)
GPU = Scale("cuda", 256, 4096, 2048, (128, 515, 1024, 8192), (1, 8, 32), oracle_tokens=16)


def gpu_marks(scale: Scale) -> list[pytest.MarkDecorator]:
    if scale.device != "cuda":
        return []
    return [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)]


@dataclass(frozen=True)
class Case:
    scale: Scale
    num_tokens: int
    top_k: int
    ep: int
    tile_size: int

    @property
    def id(self) -> str:
        return (
            f"{self.scale.device}-T{self.num_tokens}-k{self.top_k}-ep{self.ep}-tile{self.tile_size}"
        )

    @property
    def num_local(self) -> int:
        return self.scale.num_experts // self.ep

    @property
    def local_offset(self) -> int:
        """This rank's first expert: a middle rank, so both neighbours hold remote experts."""
        return (self.ep // 2) * self.num_local

    @property
    def local(self) -> range:
        return range(self.local_offset, self.local_offset + self.num_local)

    def is_local(self, experts: torch.Tensor) -> torch.Tensor:
        """bool, per element: the expert id is one of this rank's."""
        return (experts >= self.local_offset) & (experts < self.local_offset + self.num_local)

    def generator(self, salt: str = "") -> torch.Generator:
        g = torch.Generator(device=self.scale.device)
        g.manual_seed(zlib.crc32(f"{self.id}/{salt}".encode()))
        return g


def matrix(scales: tuple[Scale, ...] = (CPU, GPU)) -> list:
    """pytest params over tile x top_k x EP x tokens for each scale; GPU ones skip without CUDA."""
    return [
        pytest.param(Case(s, t, k, ep, tile), id=Case(s, t, k, ep, tile).id, marks=gpu_marks(s))
        for s in scales
        for tile in TILE_SIZES
        for k in TOP_KS
        for ep in s.ep_sizes
        for t in s.tokens
    ]


def one_case(scale: Scale = CPU, num_tokens: int = 128, top_k: int = 8, ep: int = 8) -> Case:
    return Case(scale, num_tokens, top_k, ep, TILE_SIZES[0])


def quantized_weights(
    shape: tuple[int, ...], g: torch.Generator, device: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """N(0, 1/K) weights [E, N, K] -> (packed, plain scales [E, N, K/16], global scales [E])."""
    w = torch.randn(shape, generator=g, device=device) / shape[-1] ** 0.5
    gs = FP4_RANGE / w.abs().amax(dim=(1, 2))
    packed, sf = ops.nvfp4_quantize(w, gs, swizzled=False)
    return packed, sf, gs


@dataclass
class LayerWeights:
    """All experts of one MoE layer in the kernels' layout (w1 interleaved, scales swizzled)."""

    w1: torch.Tensor
    w1_sf: torch.Tensor
    w1_gs: torch.Tensor
    w2: torch.Tensor
    w2_sf: torch.Tensor
    w2_gs: torch.Tensor
    fc1_gs: torch.Tensor  # [1]
    fc2_gs: torch.Tensor  # [1]

    @classmethod
    def build(cls, scale: Scale, chunk: int = 16) -> LayerWeights:
        g = torch.Generator(device=scale.device)
        g.manual_seed(zlib.crc32(f"weights/{scale.device}".encode()))
        names = ("w1", "w1_sf", "w1_gs", "w2", "w2_sf", "w2_gs")
        parts: dict[str, list[torch.Tensor]] = {name: [] for name in names}
        h, i = scale.hidden, scale.intermediate
        for start in range(0, scale.num_experts, chunk):
            n = min(chunk, scale.num_experts - start)
            w1, w1_sf, w1_gs = quantized_weights((n, 2 * i, h), g, scale.device)
            parts["w1"].append(ops.interleave_linear_and_gate(w1, dim=1))
            parts["w1_sf"].append(ops.swizzle_sf(ops.interleave_linear_and_gate(w1_sf, dim=1)))
            parts["w1_gs"].append(w1_gs)
            w2, w2_sf, w2_gs = quantized_weights((n, h, i), g, scale.device)
            parts["w2"].append(w2)
            parts["w2_sf"].append(ops.swizzle_sf(w2_sf))
            parts["w2_gs"].append(w2_gs)
        fc1_gs = torch.tensor([FP4_RANGE / ACTIVATION_AMAX], device=scale.device)
        fc2_gs = torch.tensor([FP4_RANGE / SWIGLU_AMAX], device=scale.device)
        return cls(**{k: torch.cat(v) for k, v in parts.items()}, fc1_gs=fc1_gs, fc2_gs=fc2_gs)

    def local(self, case: Case) -> dict[str, torch.Tensor]:
        """This rank's slice, keyed by the fused_moe argument names."""
        s = slice(case.local_offset, case.local_offset + case.num_local)
        return {
            "w1": self.w1[s], "w1_sf": self.w1_sf[s], "w1_gs": self.w1_gs[s],
            "w2": self.w2[s], "w2_sf": self.w2_sf[s], "w2_gs": self.w2_gs[s],
        }  # fmt: skip

    @cached_property
    def oracle(self) -> MoeOracle:
        cache = 16 << 30
        if self.w1.is_cuda:  # all decoded experts (51 GiB at GPU scale) if the device has room
            cache = int(0.45 * torch.cuda.get_device_properties(self.w1.device).total_memory)
        return MoeOracle(
            self.w1, self.w1_sf, self.w1_gs, self.w2, self.w2_sf, self.w2_gs,
            self.fc1_gs.item(), self.fc2_gs.item(), cache_bytes=cache,
        )  # fmt: skip


class WeightBank:
    """Builds each scale's LayerWeights on first use and keeps them for the session."""

    def __init__(self) -> None:
        self._built: dict[Scale, LayerWeights] = {}

    def get(self, scale: Scale) -> LayerWeights:
        if scale not in self._built:
            self._built[scale] = LayerWeights.build(scale)
        return self._built[scale]


@dataclass
class Routed:
    """One case's activations and routing, and its tile tables from moe_sort."""

    x: torch.Tensor  # bf16 [T, H]
    token_selected_experts: torch.Tensor  # int32 [T, top_k]
    token_final_scales: torch.Tensor  # fp32 [T, top_k]
    tables: MoeSortTables
    oracle_tokens: list[int]  # the tokens the oracle checks, each with a local (token, k)

    @classmethod
    def build(cls, case: Case, width: int, *, no_local: bool = False) -> Routed:
        """Activations of ``width`` columns (hidden for fc1, intermediate for fc2).

        At least one (token, k) is routed to a local expert, so the oracle has something to
        check; with ``no_local`` none is (every token picks other ranks' experts; needs EP > 1).
        The oracle checks only tokens with at least one local (token, k).
        """
        dev, g = case.scale.device, case.generator("routing")
        x = torch.randn(case.num_tokens, width, generator=g, device=dev).to(torch.bfloat16)
        logits = torch.rand(case.num_tokens, case.scale.num_experts, generator=g, device=dev)
        local = slice(case.local_offset, case.local_offset + case.num_local)
        if no_local:
            assert case.scale.num_experts - case.num_local >= case.top_k, case.id
            logits[:, local] = -1.0  # below every rand() logit: never picked
        tse = logits.topk(case.top_k, dim=-1).indices.int()
        if not no_local and not case.is_local(tse).any():
            logits[0, case.local_offset] = 2.0  # above every rand() logit: token 0's first pick
            tse = logits.topk(case.top_k, dim=-1).indices.int()
        tfs = torch.randn(case.num_tokens, case.top_k, generator=g, device=dev).softmax(dim=-1)
        tables = ops.moe_sort(
            tse, tfs, case.scale.num_experts, case.top_k, case.local_offset, case.num_local,
            case.tile_size,
        )  # fmt: skip
        with_local = case.is_local(tse).any(dim=1).nonzero().flatten().tolist()
        assert bool(with_local) != no_local, case.id
        spread = sample_tokens(with_local, case.scale.oracle_tokens)
        covering = tile_covering_tokens(tables, case, case.generator("cover"))
        return cls(x, tse, tfs, tables, sorted(set(spread) | set(covering)))


def run_op(op: str, fn, *args, **kwargs):
    """(fn(*args, **kwargs), the backend that ran ``op``): its error model sets the tolerance."""
    from stagebot.kernels import backends

    with backends.record_dispatch() as log:
        result = fn(*args, **kwargs)
    ran = {backend for logged, backend in log if logged == op}
    assert len(ran) == 1, f"{op} ran on {sorted(ran) or 'no backend'}: expected one"
    return result, ran.pop()


def tile_covering_tokens(tables: MoeSortTables, case: Case, g: torch.Generator) -> list[int]:
    """Tokens such that every non-exiting tile holds a valid row of one of them.

    A random valid row of each tile not yet covered names a token; that token covers the tiles
    of all its local (token, k). A bug confined to later tiles or waves cannot go unseen.
    """
    tile = case.tile_size
    tiles = int(tables.num_non_exiting_tiles)
    start = torch.arange(tiles) * tile
    mn_limit = tables.tile_idx_to_mn_limit[:tiles].long().cpu()
    pick = torch.rand(tiles, generator=g, device=case.scale.device).cpu()
    rows = start + (pick * (mn_limit - start)).long().clamp(max=tile - 1)
    tokens = (tables.permuted_idx_to_expanded_idx.long().cpu()[rows] // case.top_k).tolist()
    tiles_of = tables.expanded_idx_to_permuted_idx.long().cpu().floor_divide(tile).tolist()
    covered: set[int] = set()
    chosen: list[int] = []
    for index, token in enumerate(tokens):
        if index not in covered:
            chosen.append(token)
            covered.update(t for t in tiles_of[token] if t >= 0)
    return chosen


def sample_tokens(candidates: list[int], limit: int) -> list[int]:
    """All candidate tokens, or ``limit`` of them spread evenly, first and last included."""
    if len(candidates) <= limit:
        return list(candidates)
    picks = torch.linspace(0, len(candidates) - 1, limit).round().long().unique().tolist()
    return [candidates[i] for i in picks]
