"""The real collective that a sharded ``all_reduce`` hint becomes: a sum over the default group.

An op of its own (``stagebot_ir::dist_all_reduce``), so the structural checks count exactly these
nodes and the negative controls can remove or duplicate them.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from stagebot.harness.suites.sharding_ir.hints import NAMESPACE


@torch.library.custom_op(f"{NAMESPACE}::dist_all_reduce", mutates_args=())
def dist_all_reduce(x: Tensor) -> Tensor:
    out = x.clone()
    dist.all_reduce(out)
    return out


@dist_all_reduce.register_fake
def _(x):
    return torch.empty_like(x)


def collective_op() -> torch._ops.OpOverload:
    return torch.ops.stagebot_ir.dist_all_reduce.default
