"""Sharding hint ops (namespace ``stagebot_ir``): plain computations in eager mode, kept as
single nodes by ``torch.export`` so ``apply_sharding_hints`` can find and rewrite them.

- ``linear(x, w, b, tp_mode, output_sizes, tp_min_local_shape, layer_type)``: ``tp_mode`` is
  ``none`` | ``colwise`` (split ``w`` dim 0 and ``b``) | ``rowwise`` (split ``w`` dim 1);
  ``output_sizes`` names the pieces of a fused weight, each split on its own;
  ``tp_min_local_shape`` (head_dim for attention) is the smallest piece a rank may hold.
- ``view(x, shape, tp_scaled_dim)``: a reshape whose ``shape[tp_scaled_dim]`` becomes -1 once
  sharded (-1: no scaled dim).
- ``split_with_sizes(x, sizes, dim, enable_sharding)``: ``sizes`` divided by TP once sharded.
- ``all_reduce(x, op)``: identity until sharded, then a real reduction over the ranks: ``sum``
  (partial sums: a rowwise projection, experts) or ``avg`` (a statistic each rank computed over
  its slice, as a norm's mean of squares over a split vector).
- ``shard_like(weight, leader, dim, rows_per_entry)``: ``weight`` (identity until sharded) split
  along ``dim`` as the colwise linear hint splits ``leader``'s rows, one entry per
  ``rows_per_entry`` of them: same chunks, same replication (a norm weight over a projection's
  output follows the projection row by row; a per-head weight, attention sinks, follows q's rows
  by ``head_dim``).
- ``moe(x, topk_ids, topk_weights, w1, w2, w3, activation)``: per-expert gated-MLP weights (w1
  gate, w3 up, w2 down; ``activation`` the gate's, an ``ACTIVATIONS`` name), token ``t`` summing
  ``topk_weights[t, k] * expert[topk_ids[t, k]](x[t])``. Ids are clamped into
  ``range(len(w1))``, as gather-based kernels index, so an id outside the range (a token routed to
  another EP rank's expert) contributes unless its weight is zero: the sharder's routing mask is
  what makes it contribute nothing.

Custom ops may not return views of their inputs, so view/split/all_reduce return copies.
``torch_moe`` is the same MoE computation without hint meaning: what a leftover ``moe`` lowers to.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor

from stagebot.harness.suites.sharding_ir.errors import ShardingIRError

NAMESPACE = "stagebot_ir"
TP_MODES = ("none", "colwise", "rowwise")
REDUCE_OPS = ("sum", "avg")
# A gated MLP's activation by the name HF configs give it (``hidden_act``).
ACTIVATIONS = {
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": partial(F.gelu, approximate="tanh"),
    "gelu_new": partial(F.gelu, approximate="tanh"),  # GPT-2's and Phi's name for the same
    "relu": F.relu,
}


def activation(name: str):
    if name not in ACTIVATIONS:
        raise ShardingIRError(
            f"unknown activation {name!r}: the family's spec names one of {', '.join(ACTIVATIONS)}."
        )
    return ACTIVATIONS[name]


@torch.library.custom_op(f"{NAMESPACE}::linear", mutates_args=())
def linear(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    tp_mode: str = "none",
    output_sizes: list[int] | None = None,
    tp_min_local_shape: int = 1,
    layer_type: str = "mlp",
) -> Tensor:
    return F.linear(input, weight, bias)


@linear.register_fake
def _(
    input,
    weight,
    bias=None,
    tp_mode="none",
    output_sizes=None,
    tp_min_local_shape=1,
    layer_type="mlp",
):
    return F.linear(input, weight, bias)


@torch.library.custom_op(f"{NAMESPACE}::view", mutates_args=())
def view(x: Tensor, shape: list[int], tp_scaled_dim: int = -1) -> Tensor:
    return x.reshape(shape).clone()


@view.register_fake
def _(x, shape, tp_scaled_dim=-1):
    return x.reshape(shape).clone()


@torch.library.custom_op(f"{NAMESPACE}::split_with_sizes", mutates_args=())
def split_with_sizes(
    x: Tensor, sizes: list[int], dim: int = 0, enable_sharding: bool = False
) -> list[Tensor]:
    return [piece.clone() for piece in torch.split(x, sizes, dim)]


@split_with_sizes.register_fake
def _(x, sizes, dim=0, enable_sharding=False):
    return [piece.clone() for piece in torch.split(x, sizes, dim)]


@torch.library.custom_op(f"{NAMESPACE}::all_reduce", mutates_args=())
def all_reduce(x: Tensor, op: str = "sum") -> Tensor:
    return x.clone()


@all_reduce.register_fake
def _(x, op="sum"):
    return torch.empty_like(x)


@torch.library.custom_op(f"{NAMESPACE}::shard_like", mutates_args=())
def shard_like(weight: Tensor, leader: Tensor, dim: int = 0, rows_per_entry: int = 1) -> Tensor:
    return weight.clone()


@shard_like.register_fake
def _(weight, leader, dim=0, rows_per_entry=1):
    return torch.empty_like(weight)


def _moe_forward(x, topk_ids, topk_weights, w1, w2, w3, act: str) -> Tensor:
    out, act_fn = torch.zeros_like(x), activation(act)
    topk_ids = topk_ids.clamp(0, len(w1) - 1)
    for expert, (gate_w, down_w, up_w) in enumerate(zip(w1, w2, w3, strict=True)):
        token_idx, k_pos = torch.where(topk_ids == expert)
        tokens = x[token_idx]
        hidden = act_fn(F.linear(tokens, gate_w)) * F.linear(tokens, up_w)
        expert_out = F.linear(hidden, down_w) * topk_weights[token_idx, k_pos, None]
        out.index_add_(0, token_idx, expert_out.to(out.dtype))
    return out


def _define_moe_op(name: str):
    """One MoE custom op computing ``_moe_forward``: the ``moe`` hint and its lowering share it."""

    def compute(
        x: Tensor,
        topk_ids: Tensor,
        topk_weights: Tensor,
        w1: list[Tensor],
        w2: list[Tensor],
        w3: list[Tensor],
        activation: str = "silu",
    ) -> Tensor:
        return _moe_forward(x, topk_ids, topk_weights, w1, w2, w3, activation)

    op = torch.library.custom_op(f"{NAMESPACE}::{name}", compute, mutates_args=())

    @op.register_fake
    def _(x, topk_ids, topk_weights, w1, w2, w3, activation="silu"):
        return torch.empty_like(x)

    return op


moe = _define_moe_op("moe")
torch_moe = _define_moe_op("torch_moe")


def hint_ops() -> dict[str, torch._ops.OpOverload]:
    """Hint name -> the ``.default`` overload an exported graph's node targets."""
    ops = getattr(torch.ops, NAMESPACE)
    return {
        name: getattr(ops, name).default
        for name in ("linear", "view", "split_with_sizes", "all_reduce", "shard_like", "moe")
    }


def hint_args(node: torch.fx.Node) -> dict:
    """A hint node's arguments by schema name, defaults filled in (export may pass either way)."""
    schema = node.target._schema
    values = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            values[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            values[arg.name] = node.kwargs[arg.name]
        else:
            values[arg.name] = arg.default_value
    return values
