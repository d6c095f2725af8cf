"""NVFP4: e2m1 values in 16-element blocks, one e4m3 scale per block, one fp32 global scale.

A value decodes as ``e2m1 * e4m3_scale / global_scale``; two e2m1 codes share a byte, element 2i
in the low nibble. Quantisation follows the kernels' fp32 order of operations exactly::

    sf        = e4m3(gs * (vmax * (1/6)))           # round to nearest even, saturate at 448
    out_scale = 1 / (float(sf) * (1/gs))            # 0 when sf is 0
    code      = e2m1(x * out_scale)                 # round to nearest even, saturate at 6

These are the unchecked primitives; stagebot.kernels.ops validates arguments and calls them.
"""

from __future__ import annotations

import functools

import torch

BLOCK = 16
E4M3_MAX = 448.0

_E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Round-to-nearest-even on the e2m1 grid: a magnitude moves up one code when it passes the
# midpoint above it. At a midpoint the even code wins, so midpoints below an even code are
# inclusive bounds and midpoints below an odd code are strict ones.
_MIDPOINTS_TO_ODD = (0.25, 1.25, 2.5, 5.0)
_MIDPOINTS_TO_EVEN = (0.75, 1.75, 3.5)


@functools.cache
def _e2m1_table(device: torch.device) -> torch.Tensor:
    magnitudes = torch.tensor(_E2M1_MAGNITUDES, dtype=torch.float32)
    return torch.cat([magnitudes, -magnitudes]).to(device)


def e2m1_encode(v: torch.Tensor) -> torch.Tensor:
    """fp32 values (already scaled) -> uint8 codes 0..15, sign in bit 3 (-0.0 keeps its sign)."""
    a = v.abs()
    code = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    for bound in _MIDPOINTS_TO_ODD:
        code += a > bound
    for bound in _MIDPOINTS_TO_EVEN:
        code += a >= bound
    return code | (torch.signbit(v).to(torch.uint8) << 3)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    return _e2m1_table(codes.device)[codes.long()]


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] codes -> [..., K/2] bytes, element 2i in the low nibble."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2)


def e4m3_encode(v: torch.Tensor) -> torch.Tensor:
    """Non-negative fp32 -> e4m3 bytes, round to nearest even, saturating at 448."""
    return v.clamp(max=E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)


def e4m3_decode(sf: torch.Tensor) -> torch.Tensor:
    return sf.view(torch.float8_e4m3fn).to(torch.float32)


def quantize(x: torch.Tensor, global_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., K] -> (packed uint8 [..., K/2], unswizzled scales uint8 [..., K/16]).

    ``global_scale`` is fp32 and broadcasts against the block grid [..., K/16].
    """
    blocks = x.to(torch.float32).unflatten(-1, (-1, BLOCK))
    vmax = blocks.abs().amax(dim=-1)
    sf = e4m3_encode(global_scale * (vmax * (1.0 / 6.0)))
    sf_value = e4m3_decode(sf)
    out_scale = torch.where(
        sf_value == 0, 0.0, torch.reciprocal(sf_value * torch.reciprocal(global_scale))
    )
    codes = e2m1_encode(blocks * out_scale.unsqueeze(-1)).flatten(-2)
    return pack_fp4(codes), sf


def block_values(packed: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """fp32 ``e2m1 * e4m3`` per element, without the global scale (exact in fp32 and bf16)."""
    values = e2m1_decode(unpack_fp4(packed)).unflatten(-1, (-1, BLOCK))
    return (values * e4m3_decode(sf).unsqueeze(-1)).flatten(-2)
