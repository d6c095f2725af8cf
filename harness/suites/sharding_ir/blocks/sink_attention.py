"""Attention with learned per-head sink logits (``sink_attention``, as GPT-OSS and GraniteSWA
have): each head's softmax runs over its scores and one more logit, the head's entry of the
``sinks`` parameter, whose column is then dropped, so a head may attend to nothing. Otherwise
``softcap_attention``'s: projections and hints, the optional cap and sliding window.

The softmax is an opaque op (``stagebot_ir::sink_attention``) that reads the q:kv head ratio and
the number of heads from its inputs at run time, so a sharded graph stays valid. Sharded, a rank
keeps the sinks of its own query heads: ``sinks`` follows ``q_proj``'s rows, an entry per
``head_dim`` rows (``hints.shard_like``), and the block declares it in ``follows``, so the rows
check compares them with the heads ``q_proj`` holds (sinks split otherwise fail it).

Parameters, besides ``softcap_attention``'s: ``layer_rope_theta`` (per layer, the RoPE base: 0
leaves that layer without RoPE, NoPE; any other must be the decoder's base, the one it computes;
None: RoPE on every layer). Separate q/k/v only (the sinks follow ``q_proj``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from stagebot.harness.suites.sharding_ir import blocks, hints
from stagebot.harness.suites.sharding_ir.blocks._parts import Shapes, split_size
from stagebot.harness.suites.sharding_ir.blocks.softcap_attention import (
    SLIDING,
    SoftcapAttention,
    masked_scores,
)
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
from stagebot.harness.suites.sharding_ir.family import Arch
from stagebot.harness.suites.sharding_ir.hints import NAMESPACE


@torch.library.custom_op(f"{NAMESPACE}::sink_attention", mutates_args=())
def sink_attention_op(
    q: Tensor, k: Tensor, v: Tensor, sinks: Tensor, scale: float, softcap: float, window: int
) -> Tensor:
    """Causal attention of [batch, heads, seq, head_dim] with one sink logit per query head."""
    if sinks.shape != (q.shape[1],):
        raise ValueError(f"{tuple(sinks.shape)} sinks for {q.shape[1]} query heads: one per head")
    scores, v = masked_scores(q, k, v, scale, softcap, window)
    sink = sinks.to(scores.dtype)[None, :, None, None].expand(*scores.shape[:3], 1)
    probs = torch.softmax(torch.cat((scores, sink), -1), dim=-1, dtype=torch.float32)
    return probs[..., :-1].to(q.dtype) @ v


@sink_attention_op.register_fake
def _(q, k, v, sinks, scale, softcap, window):
    return q.new_empty(q.shape)


class SinkAttention(SoftcapAttention):
    # Sink logits of order one, as trained ones are: a sink given another head's logit then moves
    # the output beyond bf16's tolerance, not only fp32's (at 0.1, rel RMSE 0.004 in bf16).
    init = {"sinks": (0.0, 1.0)}

    def __init__(self, a: Arch, softcap, window, rope: bool, **params) -> None:
        super().__init__(a, softcap, window, **params)
        if self.fused:
            raise ShardingIRError("sink_attention: the sinks follow q_proj; use separate q/k/v.")
        self.sinks = nn.Parameter(torch.zeros(a.num_heads))
        self.rotates = rope
        self.follows = getattr(self, "follows", {}) | {"sinks": "q_proj.weight"}

    def core(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        sinks = hints.shard_like(self.sinks, self.q_proj.weight, 0, self.head_dim)
        return sink_attention_op(q, k, v, sinks, self.scale, self.softcap, self.window)

    def rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        return super().rope(x, cos, sin) if self.rotates else x

    def local_shapes(self, dc: DistConfig) -> Shapes:
        return super().local_shapes(dc) | {"sinks": (split_size(self.num_heads, dc.tp_size),)}


@blocks.register("attention", "sink_attention", extends="attention")
def sink_attention(
    a: Arch,
    layer: int,
    *,
    softcap: float | None = None,
    sliding_window: int | None = None,
    layer_types: list[str] | None = None,
    layer_rope_theta: list[float] | None = None,
    **params,
) -> SinkAttention:
    theta = a.rope_theta if layer_rope_theta is None else layer_rope_theta[layer]
    if theta not in (0, a.rope_theta):
        raise ShardingIRError(
            f"sink_attention: layer {layer} has RoPE base {theta}, the decoder computes "
            f"{a.rope_theta} only; a layer takes that base or 0 (no RoPE)."
        )
    windowed = layer_types is None or layer_types[layer] == SLIDING
    return SinkAttention(a, softcap, sliding_window if windowed else None, theta != 0, **params)
