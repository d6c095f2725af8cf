"""The RMS norm block (``rms_norm``), scaled by ``offset + weight`` (Gemma's norms keep
``weight - 1``: offset 1.0).

Across ranks (a q/k norm over a whole projection that TP splits by heads, as OLMo2's): each rank
holds a slice of the vector, so the mean of squares is the average of the ranks' local means (an
averaging all-reduce: equal slices, or groups of ranks holding the same replicated slice), and the
weight is split as the projection's rows are (``hints.shard_like``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from stagebot.harness.suites.sharding_ir import hints
from stagebot.harness.suites.sharding_ir.blocks import register
from stagebot.harness.suites.sharding_ir.family import Arch


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, offset: float, across_ranks: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps, self.offset, self.across_ranks = eps, offset, across_ranks
        # closed form, once sharded: the averaged statistic; the weight follows its leader's rows
        self.collectives = {"avg": 1} if across_ranks else {}

    def forward(self, x: Tensor, follows: Tensor | None = None) -> Tensor:
        if self.across_ranks != (follows is not None):
            raise ValueError("a norm across ranks takes the weight it follows, and only it does")
        dtype, weight = x.dtype, self.weight
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        if self.across_ranks:
            variance = hints.all_reduce(variance, "avg")
            weight = hints.shard_like(weight, follows)
        x = x * torch.rsqrt(variance + self.eps)
        return (self.offset + weight) * x.to(dtype)


@register("norm", "rms_norm")
def rms_norm(arch: Arch, size: int, *, across_ranks: bool = False, offset: float = 0.0) -> RMSNorm:
    return RMSNorm(size, arch.rms_norm_eps, offset, across_ranks)
