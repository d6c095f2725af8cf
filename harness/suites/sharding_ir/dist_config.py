"""DistConfig: how one rank's position maps onto attention TP and MoE TP x EP.

Every rank is a TP rank (``tp_size == world_size``): attention and dense MLPs shard over all
ranks. The MoE experts split the same ranks as ``moe_tp x moe_ep``::

    tp_rank     = rank % tp_size
    moe_ep_rank = tp_rank % moe_ep
    moe_tp_rank = tp_rank // moe_ep

so for "tep" (4 ranks, moe_tp 2 x moe_ep 2) ranks 0..3 are (ep, tp) = (0,0), (1,0), (0,1), (1,1).
One all-reduce over all ranks then sums both the EP and the TP partial results.
"""

from __future__ import annotations

from dataclasses import dataclass

from stagebot.harness.suites.sharding_ir.errors import ShardingIRError, did_you_mean

# name -> (world_size, moe_tp, moe_ep); the names are the --sharding-ir-dist-config choices.
NAMED_CONFIGS: dict[str, tuple[int, int, int]] = {
    "tp-only": (2, 2, 1),
    "ep-only": (2, 1, 2),
    "tep": (4, 2, 2),
}
DEFAULT_CONFIG = "tep"


@dataclass(frozen=True)
class DistConfig:
    world_size: int
    rank: int
    moe_tp: int
    moe_ep: int

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ShardingIRError(f"DistConfig: world_size must be >= 1, got {self.world_size}.")
        if not 0 <= self.rank < self.world_size:
            raise ShardingIRError(
                f"DistConfig: rank {self.rank} is outside 0..{self.world_size - 1} "
                f"for world_size {self.world_size}."
            )
        if self.moe_tp < 1 or self.moe_ep < 1 or self.moe_tp * self.moe_ep != self.tp_size:
            raise ShardingIRError(
                f"DistConfig: moe_tp ({self.moe_tp}) x moe_ep ({self.moe_ep}) must equal the TP "
                f"size {self.tp_size} (the world size), e.g. moe_tp={self.tp_size}, moe_ep=1."
            )

    @classmethod
    def named(cls, name: str, rank: int = 0) -> DistConfig:
        """The named config (``tp-only``, ``ep-only``, ``tep``) seen from ``rank``."""
        if name not in NAMED_CONFIGS:
            raise ShardingIRError(
                f"unknown dist config {name!r}; known: {', '.join(NAMED_CONFIGS)}."
                + did_you_mean(name, list(NAMED_CONFIGS))
            )
        world_size, moe_tp, moe_ep = NAMED_CONFIGS[name]
        return cls(world_size=world_size, rank=rank, moe_tp=moe_tp, moe_ep=moe_ep)

    @property
    def tp_size(self) -> int:
        return self.world_size

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp_size

    @property
    def moe_ep_rank(self) -> int:
        return self.tp_rank % self.moe_ep

    @property
    def moe_tp_rank(self) -> int:
        return self.tp_rank // self.moe_ep

    def local_experts(self, num_experts: int) -> range:
        """Experts this rank keeps: an even share each, the remainder on the last EP rank."""
        share = num_experts // self.moe_ep
        if share == 0:
            raise ShardingIRError(
                f"cannot split {num_experts} experts over EP size {self.moe_ep}: every EP rank "
                f"needs at least one expert (use moe_ep <= {num_experts})."
            )
        start = self.moe_ep_rank * share
        stop = num_experts if self.moe_ep_rank == self.moe_ep - 1 else start + share
        return range(start, stop)
