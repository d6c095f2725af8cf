"""The layer blocks: how one decoder layer composes its attention and feed-forward branches, its
norms and residuals, and which collectives that composition issues.

- ``sequential`` (Llama's and most): ``x += r * attn(x)``, then ``x += r * ffn(x)``, each branch
  reducing its own partial sums; ``norms`` places the norms (HF's module names): ``pre``
  (``input_layernorm`` before attention, ``post_attention_layernorm`` before the feed-forward
  block), ``post`` (OLMo2's: ``post_attention_layernorm`` and ``post_feedforward_layernorm``
  after each branch), ``sandwich`` (Gemma-2's: both, the feed-forward block's input norm being
  ``pre_feedforward_layernorm``).
- ``parallel`` (GPT-J, GPT-NeoX, Phi, Cohere): ``x += r * (attn(n(x)) + ffn(n'(x)))``, one
  residual; ``shared_norm`` (default): ``n' = n``, the one ``input_layernorm``; else ``n'`` is
  ``post_attention_layernorm``, also applied to the layer's input (GPT-NeoX). Both branches end
  in a rowwise projection, partial sums over TP ranks that add before they are reduced: with
  ``fused_reduce`` (default) the branches are built unreduced (``reduce=False``) and the layer
  issues one summing all-reduce for both (the layer module's, in the collective counts); without
  it, each branch reduces its own.

Every layer block is a ``Layer``: the attention is ``self_attn``, the feed-forward block the
family's sparse one where its builder builds one for this layer, else the dense ``mlp``, under
the family's module name.
"""

from __future__ import annotations

from torch import Tensor, nn

from stagebot.harness.suites.sharding_ir import blocks, hints
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
from stagebot.harness.suites.sharding_ir.family import Arch

# Norm placement -> the layer's norms before and after attention, before and after the
# feed-forward block; None where there is none.
PLACEMENTS = {
    "pre": ("input_layernorm", None, "post_attention_layernorm", None),
    "post": (None, "post_attention_layernorm", None, "post_feedforward_layernorm"),
    "sandwich": (
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ),
}


class Layer(nn.Module):
    """The branches and norms every composition has; ``reduce`` is passed to the branches only
    where it is False (a builder of a sequential layer's branch need not know the argument)."""

    def __init__(self, a: Arch, layer: int, norms: tuple[str | None, ...], reduce: bool) -> None:
        super().__init__()
        extra = {} if reduce else {"reduce": False}
        self.self_attn = blocks.build("attention", a.attention, a, layer, **extra)
        ffn = blocks.build("ffn", a.moe, a, layer, **extra) if a.moe else None
        use = a.moe if ffn is not None else a.mlp
        if ffn is None:
            ffn = blocks.build("ffn", a.mlp, a, layer, **extra)
        self.ffn_name = use.params.get("module", "mlp")  # the family's name for the block
        self.add_module(self.ffn_name, ffn)
        for name in filter(None, norms):
            self.add_module(name, blocks.build("norm", a.norm, a, a.hidden_size))
        self.residual_multiplier = a.residual_multiplier

    def ffn(self, x: Tensor) -> Tensor:
        return self.get_submodule(self.ffn_name)(x)

    def norm(self, name: str | None, x: Tensor) -> Tensor:
        return x if name is None else self.get_submodule(name)(x)


class SequentialLayer(Layer):
    def __init__(self, a: Arch, layer: int, norms: str) -> None:
        if norms not in PLACEMENTS:
            raise ShardingIRError(
                f"sequential layer: unknown norm placement {norms!r}; the family's spec names "
                f"one of {', '.join(PLACEMENTS)}."
            )
        self.placement = PLACEMENTS[norms]
        super().__init__(a, layer, self.placement, reduce=True)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        r = self.residual_multiplier
        before_attn, after_attn, before_ffn, after_ffn = self.placement
        x = x + self.norm(after_attn, self.self_attn(self.norm(before_attn, x), cos, sin)) * r
        return x + self.norm(after_ffn, self.ffn(self.norm(before_ffn, x))) * r


class ParallelLayer(Layer):
    def __init__(self, a: Arch, layer: int, shared_norm: bool, fused_reduce: bool) -> None:
        self.ffn_norm = "input_layernorm" if shared_norm else "post_attention_layernorm"
        names = ("input_layernorm",) + (() if shared_norm else (self.ffn_norm,))
        super().__init__(a, layer, names, reduce=not fused_reduce)
        self.collectives = {"sum": 1} if fused_reduce else {}

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        attn_in = self.norm("input_layernorm", x)
        ffn_in = attn_in if self.ffn_norm == "input_layernorm" else self.norm(self.ffn_norm, x)
        both = self.self_attn(attn_in, cos, sin) + self.ffn(ffn_in)
        if self.collectives:
            both = hints.all_reduce(both)
        return x + both * self.residual_multiplier


@blocks.register("layer", "sequential")
def sequential(a: Arch, layer: int, *, norms: str = "pre") -> SequentialLayer:
    return SequentialLayer(a, layer, norms)


@blocks.register("layer", "parallel")
def parallel(
    a: Arch, layer: int, *, shared_norm: bool = True, fused_reduce: bool = True
) -> ParallelLayer:
    return ParallelLayer(a, layer, shared_norm, fused_reduce)
