"""Attention whose RoPE rotates pairs of adjacent dims (``interleaved_rope_attention``, Cohere's
and GPT-J's layout) instead of the two halves of each head: ``attention`` with one method
overridden, its parameters the same.

The decoder computes RoPE's angles once, each frequency in both halves of a head (HF's default
layout); here dims ``2i`` and ``2i + 1`` share frequency ``i``, so the angles are spread pairwise
before the base class's rotation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from stagebot.harness.suites.sharding_ir import blocks
from stagebot.harness.suites.sharding_ir.blocks.attention import Attention
from stagebot.harness.suites.sharding_ir.family import Arch


class InterleavedRopeAttention(Attention):
    def rotate(self, x: Tensor) -> Tensor:
        """(x0, x1, x2, x3 ...) -> (-x1, x0, -x3, x2 ...)."""
        return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)

    def rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        half = cos.shape[-1] // 2
        cos, sin = (t[..., :half].repeat_interleave(2, dim=-1) for t in (cos, sin))
        return super().rope(x, cos, sin)


@blocks.register("attention", "interleaved_rope_attention", extends="attention")
def interleaved_rope_attention(a: Arch, layer: int, **params) -> InterleavedRopeAttention:
    return InterleavedRopeAttention(a, **params)
