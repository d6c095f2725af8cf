"""Negative controls: deliberate mistakes in a sharded graph that a check must catch."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, fx, nn

from stagebot.harness.suites.sharding_ir import sharding
from stagebot.harness.suites.sharding_ir.collectives import collective_op
from stagebot.harness.suites.sharding_ir.load_hooks import TABLE_ATTR, ParamShard


def remove_collectives(gm: fx.GraphModule) -> int:
    """Delete every collective node (its input flows on); returns how many were removed."""
    removed = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is collective_op():
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            removed += 1
    gm.recompile()
    return removed


def add_extra_collective(gm: fx.GraphModule) -> None:
    """Follow the first collective with a second one in the same module."""
    node = next(
        n for n in gm.graph.nodes if n.op == "call_function" and n.target is collective_op()
    )
    with gm.graph.inserting_after(node):
        extra = gm.graph.call_function(collective_op(), (node, node.args[1]))
    extra.meta = dict(node.meta)
    node.replace_all_uses_with(extra, delete_user_cb=lambda user: user is not extra)
    gm.recompile()


def average_as_sum(gm: fx.GraphModule) -> int:
    """Turn every averaging collective into a summing one (a block hinting ``sum`` where its
    statistic needs ``avg``); returns how many were changed."""
    changed = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is collective_op() and node.args[1] == "avg":
            node.args = (node.args[0], "sum")
            changed += 1
    gm.recompile()
    return changed


def shift_followers(
    gm: fx.GraphModule,
    full: dict[str, Tensor],
    followers: dict[str, str],
    tp_size: int,
    tp_rank: int,
) -> int:
    """Give each follower the next rank's chunk of its full tensor (same shape, other rows than its
    leader's); returns how many were shifted."""
    for follower in followers:
        owner, _, attr = follower.rpartition(".")
        chunk = full[follower].tensor_split(tp_size)[(tp_rank + 1) % tp_size].clone()
        setattr(gm.get_submodule(owner), attr, nn.Parameter(chunk, requires_grad=False))
    return len(followers)


def remove_routing_mask(gm: fx.GraphModule) -> int:
    """Feed every MoE node its unmasked routing weights (the sharder's ``weights * is_local``
    bypassed); returns how many masks were bypassed."""
    removed = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.stagebot_ir.torch_moe.default:
            continue
        weights = node.args[2]
        if (
            isinstance(weights, fx.Node)
            and weights.target is torch.ops.aten.mul.Tensor
            and getattr(weights.args[1], "target", None) is torch.ops.aten.logical_and.default
        ):
            node.args = (*node.args[:2], weights.args[0], *node.args[3:])
            removed += 1
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return removed


@contextmanager
def sharder_splits_colwise_on_dim_1() -> Iterator[None]:
    """A sharder bug: colwise weights (attention q/k/v, MLP gate/up, experts' w1/w3) split on
    dim 1 instead of dim 0, within the block only."""
    saved = dict(sharding.SPLIT_DIM)
    sharding.SPLIT_DIM["colwise"] = 1
    try:
        yield
    finally:
        sharding.SPLIT_DIM.update(saved)


def split_on_wrong_dim(
    gm: fx.GraphModule, full: dict[str, Tensor], tp_size: int, tp_rank: int
) -> str:
    """Re-shard the first row-split 2-D parameter along dim 1 instead; returns its name."""
    for name, param in gm.named_parameters():
        whole = full[name]
        if whole.dim() == 2 and param.shape[0] < whole.shape[0]:
            owner, _, attr = name.rpartition(".")
            wrong = whole.tensor_split(tp_size, 1)[tp_rank].clone()
            setattr(gm.get_submodule(owner), attr, nn.Parameter(wrong, requires_grad=False))
            return name
    raise AssertionError("no row-split parameter to sabotage: the graph is not sharded")


def clear_load_hooks(gm: nn.Module) -> int:
    """Drop every load_state_dict pre-hook (a full checkpoint then meets sharded parameters)."""
    cleared = 0
    for module in gm.modules():
        cleared += len(module._load_state_dict_pre_hooks)
        module._load_state_dict_pre_hooks.clear()
    return cleared


class _SliceAlways(ParamShard):
    def applies_to(self, incoming: Tensor) -> bool:
        return True


def slice_every_checkpoint(gm: nn.Module) -> int:
    """Make the load hooks slice every incoming tensor, an already-sharded one too."""
    changed = 0
    for module in gm.modules():
        table = getattr(module, TABLE_ATTR, None)
        for attr, shard in (table or {}).items():
            table[attr] = _SliceAlways(shard.full_shape, shard.take)
            changed += 1
    return changed
