"""Load hooks: once sharded, ``load_state_dict`` takes the full or an already-sharded checkpoint.

Each sharded parameter records its full shape and how a full tensor becomes this rank's shard. A
``load_state_dict`` pre-hook on the owning module applies that to an incoming tensor of the full
shape. Where the shard keeps the full shape (a rowwise bias kept on one rank, zero elsewhere) the
transform is idempotent, so it applies to both kinds of checkpoint.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class ParamShard:
    full_shape: torch.Size
    take: Callable[[Tensor], Tensor]  # full tensor -> this rank's shard

    def applies_to(self, incoming: Tensor) -> bool:
        """Slice only a tensor of the full shape: an already-sharded one loads as it is."""
        return incoming.shape == self.full_shape


# Attribute of each hooked module holding its table (the very dict its hook reads).
TABLE_ATTR = "_sharding_ir_load_table"


def register_load_hooks(root: nn.Module, shards: dict[str, ParamShard]) -> None:
    """Hook every owning module of a sharded parameter (``shards`` keyed by parameter path)."""
    by_owner: dict[str, dict[str, ParamShard]] = defaultdict(dict)
    for path, shard in shards.items():
        owner, _, attr = path.rpartition(".")
        by_owner[owner][attr] = shard
    for owner, table in by_owner.items():
        module = root.get_submodule(owner)
        setattr(module, TABLE_ATTR, table)
        module.register_load_state_dict_pre_hook(partial(_shard_incoming, table))


def _shard_incoming(table: dict[str, ParamShard], module, state_dict, prefix, *_args) -> None:
    for attr, shard in table.items():
        key = prefix + attr
        if key in state_dict and shard.applies_to(state_dict[key]):
            state_dict[key] = shard.take(state_dict[key])
