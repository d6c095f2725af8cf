"""The real collective that a sharded ``all_reduce`` hint becomes: a sum, or an average, over the
default group (its reduce op an argument of the node, which the structural check reads).

An op of its own (``stagebot_ir::dist_all_reduce``), so the structural checks count exactly these
nodes and the negative controls can remove or duplicate them.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from stagebot.harness.suites.sharding_ir.hints import NAMESPACE, REDUCE_OPS


@torch.library.custom_op(f"{NAMESPACE}::dist_all_reduce", mutates_args=())
def dist_all_reduce(x: Tensor, op: str) -> Tensor:
    if op not in REDUCE_OPS:
        raise ValueError(f"dist_all_reduce: op {op!r} is not one of {', '.join(REDUCE_OPS)}")
    out = x.clone()
    dist.all_reduce(out)  # a sum; gloo has no average
    return out / dist.get_world_size() if op == "avg" else out


@dist_all_reduce.register_fake
def _(x, op):
    return torch.empty_like(x)


def collective_op() -> torch._ops.OpOverload:
    return torch.ops.stagebot_ir.dist_all_reduce.default
