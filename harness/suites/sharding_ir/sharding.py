"""``apply_sharding_hints`` (per rank) and ``strip_sharding_hints`` on an exported GraphModule.

apply: each hint node shards itself for the rank's DistConfig: linear weights split colwise
(dim 0, each ``output_sizes`` piece on its own) or rowwise (dim 1; the bias kept on TP rank 0,
zero elsewhere, so the all-reduce adds it once); a ``shard_like`` weight is split as its leader's
rows were, an entry per ``rows_per_entry`` rows (after every linear); views get -1 at
``tp_scaled_dim``; split sizes are divided by TP; ``all_reduce`` becomes a real collective with
the hint's reduce op; ``moe`` keeps the rank's experts (even shares, remainder on the last EP
rank), localises expert ids and zeroes the routing weights of other ranks' experts, and splits
expert weights over MoE-TP. Where a ``tp_min_local_shape`` leaves fewer units than TP ranks (KV
heads), groups of ranks share a replicated unit. Nothing to do below two ranks.

strip: lowers leftover hints to plain ops (an unsharded ``all_reduce`` or ``shard_like``
disappears).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, fx, nn

from stagebot.harness.suites.sharding_ir.collectives import collective_op
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
from stagebot.harness.suites.sharding_ir.hints import REDUCE_OPS, TP_MODES, hint_args, hint_ops
from stagebot.harness.suites.sharding_ir.load_hooks import ParamShard, register_load_hooks

aten = torch.ops.aten
# The weight dim each TP mode splits (a colwise bias is split on its only dim, 0).
SPLIT_DIM = {"colwise": 0, "rowwise": 1}


@dataclass
class _Sharded:
    """What the pass has done so far: each sharded parameter, how each colwise weight's rows split
    (the ``_splitter`` arguments, for the weights that follow it)."""

    shards: dict[str, ParamShard] = field(default_factory=dict)
    row_splits: dict[str, dict] = field(default_factory=dict)


def apply_sharding_hints(gm: fx.GraphModule, dc: DistConfig) -> fx.GraphModule:
    """Shard ``gm`` in place for ``dc``'s rank and hook its loading; returns ``gm``."""
    if dc.world_size < 2:
        return gm
    ops = hint_ops()
    handlers = {
        ops["linear"]: _shard_linear,
        ops["view"]: _shard_view,
        ops["split_with_sizes"]: _shard_split,
        ops["all_reduce"]: _shard_all_reduce,
        ops["moe"]: _shard_moe,
    }
    done = _Sharded()
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    for node in nodes:
        if node.target in handlers:
            handlers[node.target](gm, node, dc, done)
    for node in nodes:  # once every leader is split
        if node.target is ops["shard_like"]:
            _shard_follower(gm, node, dc, done)
    gm.graph.lint()
    gm.recompile()
    register_load_hooks(gm, done.shards)
    return gm


def strip_sharding_hints(gm: fx.GraphModule) -> fx.GraphModule:
    """Lower every hint node left in ``gm`` to plain ops, dropping hint-only arguments."""
    ops = hint_ops()
    lowering = {
        ops["linear"]: lambda a: (aten.linear.default, (a["input"], a["weight"], a["bias"])),
        ops["view"]: lambda a: (aten.reshape.default, (a["x"], a["shape"])),
        ops["split_with_sizes"]: lambda a: (
            aten.split_with_sizes.default,
            (a["x"], a["sizes"], a["dim"]),
        ),
        ops["moe"]: lambda a: (
            torch.ops.stagebot_ir.torch_moe.default,
            tuple(a[k] for k in ("x", "topk_ids", "topk_weights", "w1", "w2", "w3", "activation")),
        ),
    }
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in (ops["all_reduce"], ops["shard_like"]):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
        elif node.target in lowering:
            node.target, node.args = lowering[node.target](hint_args(node))
            node.kwargs = {}
    gm.graph.lint()
    gm.recompile()
    return gm


def _set_args(node: fx.Node, **updates) -> None:
    values = hint_args(node) | updates
    node.args = tuple(values[a.name] for a in node.target._schema.arguments)
    node.kwargs = {}


def _plan(
    node: fx.Node, what: str, size: int, parts: int, rank: int, min_size: int, replicate: bool
) -> tuple[int, int]:
    """(number of chunks, this rank's chunk) for splitting ``size`` over ``parts`` ranks."""
    units, whole = divmod(size, min_size)
    if whole == 0 and units >= parts and units % parts == 0:
        return parts, rank
    if whole == 0 and replicate and units < parts and parts % units == 0:
        return units, rank // (parts // units)
    raise ShardingIRError(
        f"node {node.name!r} ({what}): cannot split size {size} over TP size {parts} in units of "
        f"{min_size}; the size must be a multiple of {min_size} * {parts} = {min_size * parts}"
        + (f" (or {min_size} times a divisor of {parts}, replicated)." if replicate else ".")
    )


def _splitter(
    node: fx.Node,
    what: str,
    size: int,
    dim: int,
    parts: int,
    rank: int,
    *,
    min_size: int = 1,
    pieces: list[int] | None = None,
    replicate: bool = False,
) -> tuple[Callable[[Tensor], Tensor], list[int]]:
    """A ``take`` splitting ``dim`` (each of ``pieces`` on its own) and the local piece sizes."""
    pieces = list(pieces or [size])
    if sum(pieces) != size:
        raise ShardingIRError(
            f"node {node.name!r} ({what}): output_sizes {pieces} do not add up to {size}."
        )
    plans = [_plan(node, what, p, parts, rank, min_size, replicate) for p in pieces]

    def take(t: Tensor) -> Tensor:
        split = t.split(pieces, dim)
        return torch.cat(
            [p.tensor_split(n, dim)[i] for p, (n, i) in zip(split, plans, strict=True)], dim
        )

    return take, [p // n for p, (n, _) in zip(pieces, plans, strict=True)]


def _shard_param(
    gm: fx.GraphModule, attr: fx.Node, done: _Sharded, take: Callable[[Tensor], Tensor]
) -> None:
    owner, _, name = attr.target.rpartition(".")
    module = gm.get_submodule(owner)
    full = getattr(module, name)
    setattr(module, name, nn.Parameter(take(full.detach()).clone(), requires_grad=False))
    done.shards[attr.target] = ParamShard(full.shape, take)


def _shard_linear(gm: fx.GraphModule, node: fx.Node, dc: DistConfig, done: _Sharded) -> None:
    a = hint_args(node)
    mode, weight, bias = a["tp_mode"], a["weight"], a["bias"]
    if mode not in TP_MODES:
        raise ShardingIRError(
            f"node {node.name!r}: tp_mode {mode!r} is not one of {', '.join(TP_MODES)}."
        )
    if mode == "none":
        return
    shape = gm.get_parameter(weight.target).shape
    tp, rank, min_size = dc.tp_size, dc.tp_rank, a["tp_min_local_shape"]
    dim = SPLIT_DIM[mode]
    if mode == "colwise":
        pieces = a["output_sizes"]
        split = dict(min_size=min_size, pieces=pieces, replicate=True)
        take, local = _splitter(node, weight.target, shape[dim], dim, tp, rank, **split)
        _shard_param(gm, weight, done, take)
        done.row_splits[weight.target] = split
        if bias is not None:
            take_bias, _ = _splitter(node, bias.target, shape[0], 0, tp, rank, **split)
            _shard_param(gm, bias, done, take_bias)
        if pieces:
            _set_args(node, output_sizes=local)
        return
    if a["output_sizes"]:
        raise ShardingIRError(
            f"node {node.name!r}: output_sizes apply to colwise linears, not rowwise."
        )
    take, _ = _splitter(node, weight.target, shape[dim], dim, tp, rank, min_size=min_size)
    _shard_param(gm, weight, done, take)
    if bias is not None:
        _shard_param(gm, bias, done, lambda b: b if rank == 0 else torch.zeros_like(b))


def _shard_follower(gm: fx.GraphModule, node: fx.Node, dc: DistConfig, done: _Sharded) -> None:
    a = hint_args(node)
    weight, leader, dim, per = a["weight"], a["leader"], a["dim"], a["rows_per_entry"]
    if weight.op != "get_attr":
        raise ShardingIRError(
            f"node {node.name!r}: shard_like takes a parameter as it is, not {weight.name!r} "
            "computed from one: name the parameter itself."
        )
    if leader.op != "get_attr" or leader.target not in done.row_splits:
        raise ShardingIRError(
            f"node {node.name!r}: {weight.target} follows the rows of {leader.target}, which no "
            "colwise linear hint splits; a weight can follow only a colwise-split weight."
        )
    rows = done.shards[leader.target].full_shape[0]
    size = gm.get_parameter(weight.target).shape[dim]
    if size * per != rows:
        raise ShardingIRError(
            f"node {node.name!r}: {weight.target} has {size} entries along dim {dim}, its leader "
            f"{leader.target} {rows} rows; a follower has one entry per {per} rows of its leader "
            f"(rows_per_entry), so {rows // per} entries."
        )
    split = done.row_splits[leader.target]
    if split["min_size"] % per or any(p % per for p in split["pieces"] or []):
        raise ShardingIRError(
            f"node {node.name!r}: {leader.target} splits in units of {split['min_size']} rows "
            f"(pieces {split['pieces']}), which {per} rows per entry of {weight.target} do not "
            "divide: an entry must follow whole units of its leader."
        )
    pieces = [p // per for p in split["pieces"]] if split["pieces"] else None
    split = split | {"min_size": split["min_size"] // per, "pieces": pieces}
    take, _ = _splitter(node, weight.target, size, dim, dc.tp_size, dc.tp_rank, **split)
    _shard_param(gm, weight, done, take)


def _shard_view(gm: fx.GraphModule, node: fx.Node, dc: DistConfig, done: _Sharded) -> None:
    a = hint_args(node)
    if a["tp_scaled_dim"] >= 0:
        shape = list(a["shape"])
        shape[a["tp_scaled_dim"]] = -1
        _set_args(node, shape=shape)


def _shard_split(gm: fx.GraphModule, node: fx.Node, dc: DistConfig, done: _Sharded) -> None:
    a = hint_args(node)
    if not a["enable_sharding"]:
        return
    if any(size % dc.tp_size for size in a["sizes"]):
        raise ShardingIRError(
            f"node {node.name!r}: split sizes {a['sizes']} are not all divisible by "
            f"TP size {dc.tp_size}."
        )
    _set_args(node, sizes=[size // dc.tp_size for size in a["sizes"]])


def _shard_all_reduce(gm: fx.GraphModule, node: fx.Node, dc: DistConfig, done: _Sharded) -> None:
    a = hint_args(node)
    if a["op"] not in REDUCE_OPS:
        raise ShardingIRError(
            f"node {node.name!r}: all_reduce op {a['op']!r} is not one of {', '.join(REDUCE_OPS)}."
        )
    node.target, node.args, node.kwargs = collective_op(), (a["x"], a["op"]), {}


def _shard_moe(gm: fx.GraphModule, node: fx.Node, dc: DistConfig, done: _Sharded) -> None:
    a = hint_args(node)
    w1, w2, w3 = a["w1"], a["w2"], a["w3"]
    local = dc.local_experts(len(w1))
    if dc.moe_tp > 1:  # w1/w3 colwise, w2 rowwise over the MoE-TP ranks
        for e in local:
            for attr, mode in ((w1[e], "colwise"), (w3[e], "colwise"), (w2[e], "rowwise")):
                dim = SPLIT_DIM[mode]
                size = gm.get_parameter(attr.target).shape[dim]
                take, _ = _splitter(node, attr.target, size, dim, dc.moe_tp, dc.moe_tp_rank)
                _shard_param(gm, attr, done, take)
    ids, weights = a["topk_ids"], a["topk_weights"]
    if len(local) < len(w1):
        graph = gm.graph
        with graph.inserting_before(node):
            is_local = graph.call_function(
                aten.logical_and.default,
                (
                    graph.call_function(aten.ge.Scalar, (ids, local.start)),
                    graph.call_function(aten.lt.Scalar, (ids, local.stop)),
                ),
            )
            weights = graph.call_function(aten.mul.Tensor, (weights, is_local))
            ids = graph.call_function(aten.sub.Scalar, (ids, local.start))
    keep = slice(local.start, local.stop)
    _set_args(node, topk_ids=ids, topk_weights=weights, w1=w1[keep], w2=w2[keep], w3=w3[keep])
    for e in set(range(len(w1))) - set(local):
        for attr in (w1[e], w2[e], w3[e]):
            gm.graph.erase_node(attr)
            owner, _, name = attr.target.rpartition(".")
            delattr(gm.get_submodule(owner), name)
