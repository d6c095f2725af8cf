"""Attention with soft-capped scores and a sliding window (``softcap_attention``, Gemma-2's):
``attention``'s projections and hints, its softmax an opaque op (``stagebot_ir::
softcap_attention``) that reads the q:kv head ratio from its inputs at run time.

Written in plain torch ops, the exported graph would repeat each KV head a fixed number of times
(heads / kv heads of the unsharded model); sharding changes the local ratio (KV heads replicated
when fewer than TP ranks), and the graph would no longer fit. One custom op is one node that
computes from whatever heads it is given.

Parameters, besides ``attention``'s: ``softcap`` (scores become ``cap * tanh(scores / cap)``;
None: none), ``sliding_window`` (a query sees the keys less than this many positions back; None:
all) and ``layer_types`` (per layer: the window applies where it says ``sliding_attention``;
None: every layer).
"""

from __future__ import annotations

import torch
from torch import Tensor

from stagebot.harness.suites.sharding_ir import blocks
from stagebot.harness.suites.sharding_ir.blocks.attention import Attention
from stagebot.harness.suites.sharding_ir.family import Arch
from stagebot.harness.suites.sharding_ir.hints import NAMESPACE

SLIDING = "sliding_attention"  # the layer type that has the window


def masked_scores(
    q: Tensor, k: Tensor, v: Tensor, scale: float, softcap: float, window: int
) -> tuple[Tensor, Tensor]:
    """Causal scores [batch, heads, seq, seq] (``softcap``/``window`` 0: none; hidden keys -inf)
    and the values repeated to the query heads, at the ratio these tensors have, sharded or not:
    what an opaque attention op computes its softmax over."""
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads are no multiple of {k.shape[1]} KV heads")
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = q @ k.transpose(-1, -2) * scale
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    pos = torch.arange(q.shape[2], device=q.device)
    seen = pos[None, :] <= pos[:, None]
    if window:
        seen &= pos[None, :] > pos[:, None] - window
    return scores.masked_fill(~seen, float("-inf")), v


@torch.library.custom_op(f"{NAMESPACE}::softcap_attention", mutates_args=())
def softcap_attention_op(
    q: Tensor, k: Tensor, v: Tensor, scale: float, softcap: float, window: int
) -> Tensor:
    """Causal attention of [batch, heads, seq, head_dim]; ``softcap``/``window`` 0: none."""
    scores, v = masked_scores(q, k, v, scale, softcap, window)
    return torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype) @ v


@softcap_attention_op.register_fake
def _(q, k, v, scale, softcap, window):
    return q.new_empty(q.shape)


class SoftcapAttention(Attention):
    def __init__(self, a: Arch, softcap: float | None, window: int | None, **params) -> None:
        super().__init__(a, **params)
        self.softcap, self.window = softcap or 0.0, window or 0

    def core(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return softcap_attention_op(q, k, v, self.scale, self.softcap, self.window)


@blocks.register("attention", "softcap_attention", extends="attention")
def softcap_attention(
    a: Arch,
    layer: int,
    *,
    softcap: float | None = None,
    sliding_window: int | None = None,
    layer_types: list[str] | None = None,
    **params,
) -> SoftcapAttention:
    windowed = layer_types is None or layer_types[layer] == SLIDING
    return SoftcapAttention(a, softcap, sliding_window if windowed else None, **params)
