"""An independent float64 oracle for the NVFP4 MoE ops; it shares no code with stagebot.kernels.

It decodes e2m1 and e4m3 from their bit fields, reads swizzled scales through the offset
formula, undoes the SwiGLU row interleave by index arithmetic, rounds to NVFP4 by searching the
value grids for the nearest point (ties to the even code) after the spec's fp32 steps, and
computes everything else in float64, each token's output from that token's row alone: no tile
tables, no permutation.

The steps that act on each row alone (the NVFP4 round trips, SwiGLU) run once over all of a
call's rows; only the GEMMs run per expert, over that expert's rows. (Run per expert, a round
trip's hundred-odd small ops cost a GPU more in launches than the whole layer's arithmetic.)
"""

from __future__ import annotations

import functools
import itertools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

F64 = torch.float64
BLOCK = 16
SWIGLU_GROUP = 64


def decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    c = codes.long()
    sign = 1.0 - 2.0 * ((c >> 3) & 1).to(F64)
    exponent, mantissa = (c >> 1) & 3, (c & 1).to(F64)
    normal = (1.0 + 0.5 * mantissa) * torch.exp2((exponent - 1).to(F64))
    return sign * torch.where(exponent == 0, 0.5 * mantissa, normal)


def decode_e4m3(sf: torch.Tensor) -> torch.Tensor:
    b = sf.long()
    sign = 1.0 - 2.0 * ((b >> 7) & 1).to(F64)
    exponent, mantissa = (b >> 3) & 15, (b & 7).to(F64)
    subnormal = mantissa / 8.0 * 2.0**-6
    normal = (1.0 + mantissa / 8.0) * torch.exp2((exponent - 7).to(F64))
    value = sign * torch.where(exponent == 0, subnormal, normal)
    return torch.where((b & 0x7F) == 0x7F, torch.nan, value)


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] bytes -> [..., K] codes; the low nibble holds the even element."""
    return torch.stack((packed & 0x0F, packed >> 4), dim=-1).flatten(-2)


def pack(codes: torch.Tensor) -> torch.Tensor:
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)


def swizzled_offsets(rows: int, cols: int, device: torch.device | str) -> torch.Tensor:
    """offset(m, k) = (m//128)*(Kt*512) + (k//4)*512 + (m%32)*16 + ((m%128)//32)*4 + k%4."""
    m = torch.arange(rows, device=device).unsqueeze(1)
    k = torch.arange(cols, device=device).unsqueeze(0)
    k_tiles = (cols + 3) // 4
    return (
        (m // 128) * (k_tiles * 512)
        + (k // 4) * 512
        + (m % 32) * 16
        + ((m % 128) // 32) * 4
        + k % 4
    )


def read_scales(flat: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The [rows, cols] scale bytes of one swizzled matrix."""
    return flat.reshape(-1)[swizzled_offsets(rows, cols, flat.device)]


E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # index = code


@functools.cache
def e2m1_grid(device: torch.device) -> torch.Tensor:
    """The non-negative e2m1 values, index = code, ascending."""
    return torch.tensor(E2M1_GRID, dtype=F64, device=device)


@functools.cache
def e4m3_grid(device: torch.device) -> torch.Tensor:
    """The finite non-negative e4m3 values, index = byte (0x00 .. 0x7E), ascending."""
    return decode_e4m3(torch.arange(0x7F, device=device))


def nearest(v: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Index of the grid point nearest each v >= 0; ties go to the even index; saturates."""
    hi = torch.searchsorted(grid, v).clamp(max=grid.numel() - 1)
    lo = (hi - 1).clamp(min=0)
    below, above = v - grid[lo], grid[hi] - v
    take_hi = (above < below) | ((above == below) & (hi % 2 == 0))
    return torch.where(take_hi, hi, lo)


def _fp32(t: torch.Tensor | float) -> torch.Tensor | float:
    """Rounds to the nearest fp32 value (kept in float64)."""
    if isinstance(t, float):
        return torch.tensor(t, dtype=torch.float32).item()
    return t.to(torch.float32).to(F64)


def quantize(v: torch.Tensor, gs: float) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., K] -> (codes uint8 [..., K], scale bytes uint8 [..., K/16]).

    The spec defines the rounding by fp32 steps, so each step is rounded to fp32 here: a float64
    result of one operation on fp32 operands, rounded once, is the correctly rounded fp32 result.
    """
    blocks = v.to(F64).unflatten(-1, (-1, BLOCK))
    gs = _fp32(gs)
    vmax = _fp32(blocks.abs().amax(dim=-1))
    sf_byte = nearest(_fp32(gs * _fp32(vmax * _fp32(1.0 / 6.0))), e4m3_grid(v.device))
    sf = decode_e4m3(sf_byte)
    out_scale = torch.where(sf > 0, _fp32(1.0 / _fp32(sf * _fp32(1.0 / gs))), 0.0)
    scaled = _fp32(blocks * out_scale.unsqueeze(-1))
    magnitude = nearest(scaled.abs(), e2m1_grid(v.device))
    codes = magnitude | (torch.signbit(scaled).long() << 3)
    return codes.flatten(-2).to(torch.uint8), sf_byte.to(torch.uint8)


def dequantize(codes: torch.Tensor, sf: torch.Tensor, gs: float) -> torch.Tensor:
    values = decode_e2m1(codes).unflatten(-1, (-1, BLOCK))
    return (values * decode_e4m3(sf).unsqueeze(-1) / gs).flatten(-2)


def round_trip(v: torch.Tensor, gs: float) -> torch.Tensor:
    """v after NVFP4 quantisation with global scale gs, in float64."""
    return dequantize(*quantize(v, gs), gs)


def swiglu_rows(intermediate: int, device: torch.device | str) -> torch.Tensor:
    """Rows of the interleaved SwiGLU weight in logical order: linear 0..I-1, then gate 0..I-1."""
    logical = torch.arange(2 * intermediate, device=device)
    part, j = logical // intermediate, logical % intermediate
    return (j // SWIGLU_GROUP) * (2 * SWIGLU_GROUP) + part * SWIGLU_GROUP + j % SWIGLU_GROUP


@dataclass(frozen=True)
class Combined:
    """A weighted sum of GEMM rows per token, float64 [n, H], with what bounds its rounding.

    ``magnitude`` is the sum of the terms' magnitudes (sum_k |s_k * row_k|): a sum whose terms or
    partial sums are rounded errs in proportion to it. ``products`` is sum_k |s_k| * sum_i
    |a_i * w_i|: the same for the GEMM's own reduction over its K products.
    """

    value: torch.Tensor
    magnitude: torch.Tensor
    products: torch.Tensor


class MoeOracle:
    """One MoE layer, all experts, weights in the kernels' layout, evaluated token by token.

    Decoded float64 weights are kept in a least-recently-used cache of ``cache_bytes``.
    """

    def __init__(
        self,
        w1: torch.Tensor,
        w1_sf: torch.Tensor,
        w1_gs: torch.Tensor,
        w2: torch.Tensor,
        w2_sf: torch.Tensor,
        w2_gs: torch.Tensor,
        fc1_gs: float,
        fc2_gs: float,
        cache_bytes: int = 16 << 30,
    ) -> None:
        self.w1, self.w1_sf, self.w1_gs = w1, w1_sf, w1_gs.tolist()
        self.w2, self.w2_sf, self.w2_gs = w2, w2_sf, w2_gs.tolist()
        self.fc1_gs, self.fc2_gs = fc1_gs, fc2_gs
        self.intermediate = w1.shape[1] // 2
        self._w1_rows = swiglu_rows(self.intermediate, w1.device)
        self._cache: OrderedDict[tuple[str, int], torch.Tensor] = OrderedDict()
        self._cache_bytes = cache_bytes

    def _decode(self, packed: torch.Tensor, flat_sf: torch.Tensor, gs: float) -> torch.Tensor:
        rows, half_k = packed.shape
        sf = read_scales(flat_sf, rows, 2 * half_k // BLOCK)
        return dequantize(unpack(packed), sf, gs)

    def weight(self, which: str, expert: int) -> torch.Tensor:
        """float64 w1 [2I, H] (linear rows, then gate rows) or w2 [H, I] of a global expert."""
        key = (which, expert)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        if which == "w1":
            w = self._decode(self.w1[expert], self.w1_sf[expert], self.w1_gs[expert])
            w = w[self._w1_rows]
        else:
            w = self._decode(self.w2[expert], self.w2_sf[expert], self.w2_gs[expert])
        self._cache[key] = w
        while sum(t.numel() * 8 for t in self._cache.values()) > self._cache_bytes:
            self._cache.popitem(last=False)
        return w

    def swiglu(self, x_rows: torch.Tensor, experts: Sequence[int]) -> torch.Tensor:
        """[P, I]: row p is expert ``experts[p]``'s linear * silu(gate) of ``x_rows[p]`` [P, H]
        (rounded to NVFP4 with fc1_gs first), before its own NVFP4 rounding."""
        x = round_trip(x_rows, self.fc1_gs)
        fc1 = self._per_expert(x, experts, lambda e: self.weight("w1", e), 2 * self.intermediate)
        linear, gate = fc1.split(self.intermediate, dim=-1)
        return linear * gate / (1.0 + torch.exp(-gate))

    def fc2(
        self, act_rows: torch.Tensor, experts: Sequence[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows [P, H], products [P, H]): row p is expert ``experts[p]``'s down projection of
        ``act_rows[p]`` [P, I] (rounded to NVFP4 with fc2_gs first), and the sum over its
        reduction of |activation * weight|: a finite-precision sum's rounding error is bounded in
        proportion to the latter, not to the result."""
        act = round_trip(act_rows, self.fc2_gs)
        width = self.w2.shape[1]
        rows = self._per_expert(act, experts, lambda e: self.weight("w2", e), width)
        products = self._per_expert(act.abs(), experts, lambda e: self.weight("w2", e).abs(), width)
        return rows, products

    def _per_expert(
        self,
        rows: torch.Tensor,
        experts: Sequence[int],
        weight: Callable[[int], torch.Tensor],
        width: int,
    ) -> torch.Tensor:
        """[P, width]: rows[p] @ weight(experts[p]).T, one matmul per expert over its rows
        (in their given order)."""
        order = sorted(range(len(experts)), key=experts.__getitem__)
        index = torch.tensor(order, dtype=torch.long, device=rows.device)
        grouped = rows[index]
        out = torch.empty(len(order), width, dtype=F64, device=rows.device)
        start = 0
        for expert, run in itertools.groupby(experts[i] for i in order):
            end = start + sum(1 for _ in run)
            torch.mm(grouped[start:end], weight(expert).T, out=out[start:end])
            start = end
        unsorted = torch.empty_like(out)
        unsorted[index] = out
        return unsorted

    def layer(
        self,
        x_rows: torch.Tensor,
        experts: list[list[int]],
        scales: list[list[float]],
        local: range,
    ) -> Combined:
        """[n, H]: each token's MoE output, summed over its experts local to this rank."""
        return self.combine(
            x_rows, experts, scales, local, lambda rows, e: self.fc2(self.swiglu(rows, e), e)
        )

    def combine(
        self,
        x_rows: torch.Tensor,
        experts: list[list[int]],
        scales: list[list[float]],
        local: range,
        pairs_fn: Callable[[torch.Tensor, list[int]], tuple[torch.Tensor, torch.Tensor]],
    ) -> Combined:
        """Per token, the sum of scale * term over its local experts, where
        ``pairs_fn(rows, experts)`` gives each (token, expert) pair's (term, its products'
        magnitudes) from the token's row; with the magnitudes that bound the rounding of such a
        sum (see Combined). Each output row depends only on its own token.
        """
        n, top_k = len(experts), max(map(len, experts), default=0)
        pairs = [
            (i * top_k + slot, i, expert, scale)
            for i, (row_experts, row_scales) in enumerate(zip(experts, scales, strict=True))
            for slot, (expert, scale) in enumerate(zip(row_experts, row_scales, strict=True))
            if expert in local
        ]
        device = x_rows.device
        slots, tokens = (
            torch.tensor([p[k] for p in pairs], dtype=torch.long, device=device) for k in (0, 1)
        )
        weight = torch.tensor([p[3] for p in pairs], dtype=F64, device=device).unsqueeze(1)
        terms, term_products = pairs_fn(x_rows[tokens], [p[2] for p in pairs])
        terms = terms * weight

        def summed(per_pair: torch.Tensor) -> torch.Tensor:
            """[n, H]: each token's pairs summed in slot order (deterministic on any device)."""
            width = self.w2.shape[1]
            full = torch.zeros(n * top_k, width, dtype=F64, device=device)
            full[slots] = per_pair
            return full.view(n, top_k, width).sum(dim=1)

        return Combined(summed(terms), summed(terms.abs()), summed(term_products * weight.abs()))
