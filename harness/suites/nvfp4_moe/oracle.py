"""An independent float64 oracle for the NVFP4 MoE ops; it shares no code with stagebot.kernels.

It decodes e2m1 and e4m3 from their bit fields, reads swizzled scales through the offset
formula, undoes the SwiGLU row interleave by index arithmetic, rounds to NVFP4 by searching the
value grids for the nearest point (ties to the even code) after the spec's fp32 steps, and
computes everything else in float64, one token at a time: no sorting, no tile tables, no
permutation.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
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


def _grid(device: torch.device | str, values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=F64, device=device)


E2M1_GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # index = code


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
    magnitude = nearest(scaled.abs(), _grid(v.device, E2M1_GRID))
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

    def fc1(self, expert: int, x_rows: torch.Tensor) -> torch.Tensor:
        """[..., 2I]: linear then gate, from the NVFP4-rounded activation rows [..., H]."""
        return round_trip(x_rows, self.fc1_gs) @ self.weight("w1", expert).T

    def swiglu(self, expert: int, x_rows: torch.Tensor) -> torch.Tensor:
        """[..., I]: linear * silu(gate), before its NVFP4 rounding."""
        linear, gate = self.fc1(expert, x_rows).split(self.intermediate, dim=-1)
        return linear * gate / (1.0 + torch.exp(-gate))

    def fc2(self, expert: int, act_rows: torch.Tensor) -> torch.Tensor:
        """[..., H] from the NVFP4-rounded (with fc2_gs) activation rows [..., I]."""
        return self.fc2_with_products(expert, act_rows)[0]

    def fc2_with_products(
        self, expert: int, act_rows: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(fc2 rows, sum over the reduction of |activation * weight|): a finite-precision sum's
        rounding error is bounded in proportion to the latter, not to the result."""
        act, weight = round_trip(act_rows, self.fc2_gs), self.weight("w2", expert)
        return act @ weight.T, act.abs() @ weight.abs().T

    def layer(
        self,
        x_rows: torch.Tensor,
        experts: list[list[int]],
        scales: list[list[float]],
        local: range,
    ) -> Combined:
        """[n, H]: each token's MoE output, summed over its experts local to this rank."""
        return self.combine(
            x_rows,
            experts,
            scales,
            local,
            lambda e, rows: self.fc2_with_products(e, self.swiglu(e, rows)),
        )

    def combine(
        self,
        x_rows: torch.Tensor,
        experts: list[list[int]],
        scales: list[list[float]],
        local: range,
        expert_fn,
    ) -> Combined:
        """Per token, the sum of scale * term over its local experts, where
        ``expert_fn(expert, rows)`` gives (terms, their products' magnitudes); with the
        magnitudes that bound the rounding of such a sum (see Combined).

        Each output row depends only on its own token; one expert's rows are evaluated together.
        """
        out = torch.zeros(len(experts), self.w2.shape[1], dtype=F64, device=x_rows.device)
        magnitude, products = torch.zeros_like(out), torch.zeros_like(out)
        by_expert: dict[int, list[tuple[int, float]]] = {}
        for i, (row_experts, row_scales) in enumerate(zip(experts, scales, strict=True)):
            for expert, scale in zip(row_experts, row_scales, strict=True):
                if expert in local:
                    by_expert.setdefault(expert, []).append((i, scale))
        for expert, items in sorted(by_expert.items()):
            rows = torch.tensor([i for i, _ in items], device=x_rows.device)
            weight = torch.tensor([w for _, w in items], dtype=F64, device=x_rows.device)
            terms, term_products = expert_fn(expert, x_rows[rows])
            terms = terms * weight.unsqueeze(1)
            out.index_add_(0, rows, terms)
            magnitude.index_add_(0, rows, terms.abs())
            products.index_add_(0, rows, term_products * weight.abs().unsqueeze(1))
        return Combined(out, magnitude, products)
