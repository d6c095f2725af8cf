"""The norm blocks: RMS norm (``rms_norm``), scaled by ``offset + weight`` (Gemma's norms keep
``weight - 1``: offset 1.0), and LayerNorm (``layer_norm``, with a bias unless ``bias=False``,
as Cohere's). Both take the family's epsilon (``Arch.norm_eps``, read under the name the entry
declares) and state how their scale is drawn (``init``): around the value that makes the norm an
identity (1, or 0 under an offset), whatever its shape (a per-head norm's weight may be 2-D).

Across ranks (a q/k norm over a whole projection that TP splits by heads, as OLMo2's; RMS only):
each rank holds a slice of the vector, so the mean of squares is the average of the ranks' local
means (an averaging all-reduce: equal slices, or groups of ranks holding the same replicated
slice), and the weight is split as the projection's rows are (``hints.shard_like``).

Per head (``size`` a (heads, head_dim) pair, Cohere's q/k norms): each head normalised over its
own dims by its own row of the weight; under TP a rank keeps the rows of its heads, following the
projection's rows by ``head_dim`` (the ``follows`` argument of the forward).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stagebot.harness.suites.sharding_ir import hints
from stagebot.harness.suites.sharding_ir.blocks import register
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
from stagebot.harness.suites.sharding_ir.family import Arch

SCALE_STD = 0.1  # the spread of a norm's scale around its identity


def _following(weight: Tensor, follows: Tensor | None) -> Tensor:
    """``weight`` as the rank holds it: split like ``follows``'s rows, an entry per row of it
    (a vector's) or per ``head_dim`` rows (a per-head weight's rows); itself without a leader."""
    if follows is None:
        return weight
    return hints.shard_like(weight, follows, 0, 1 if weight.dim() == 1 else weight.shape[-1])


class RMSNorm(nn.Module):
    def __init__(
        self, size: int | tuple[int, int], eps: float, offset: float, across_ranks: bool
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps, self.offset, self.across_ranks = eps, offset, across_ranks
        self.init = {"weight": (1.0 - offset, SCALE_STD)}
        # closed form, once sharded: the averaged statistic; the weight follows its leader's rows
        self.collectives = {"avg": 1} if across_ranks else {}

    def forward(self, x: Tensor, follows: Tensor | None = None) -> Tensor:
        if self.across_ranks and follows is None:
            raise ValueError("a norm across ranks takes the weight it follows")
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        if self.across_ranks:
            variance = hints.all_reduce(variance, "avg")
        x = x * torch.rsqrt(variance + self.eps)
        return (self.offset + _following(self.weight, follows)) * x.to(dtype)


class LayerNorm(nn.Module):
    """Mean and variance over the last dim, in fp32, then scale (and bias) in the input's dtype."""

    def __init__(self, size: int | tuple[int, int], eps: float, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size)) if bias else None
        self.eps = eps
        self.init = {"weight": (1.0, SCALE_STD)}  # its bias: a bias's (build.reinit_)

    def forward(self, x: Tensor, follows: Tensor | None = None) -> Tensor:
        normed = F.layer_norm(x.to(torch.float32), x.shape[-1:], eps=self.eps).to(x.dtype)
        return normed * _following(self.weight, follows) + (0 if self.bias is None else self.bias)


@register("norm", "rms_norm")
def rms_norm(
    arch: Arch, size: int | tuple[int, int], *, across_ranks: bool = False, offset: float = 0.0
) -> RMSNorm:
    return RMSNorm(size, arch.norm_eps, offset, across_ranks)


@register("norm", "layer_norm")
def layer_norm(
    arch: Arch, size: int | tuple[int, int], *, across_ranks: bool = False, bias: bool = True
) -> LayerNorm:
    if across_ranks:
        raise ShardingIRError(
            "layer_norm: a norm across TP ranks (qk_norm='projection') is RMS only here; its mean "
            "would need a second averaged statistic."
        )
    if bias and not isinstance(size, int):
        raise ShardingIRError(
            "layer_norm: a per-head norm (qk_norm='per_head') has no bias here: the bias would "
            "follow the heads too; give the norm block bias=False."
        )
    return LayerNorm(size, arch.norm_eps, bias)
