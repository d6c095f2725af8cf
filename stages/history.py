"""What the planner may ask about earlier pipelines: a read-only History (the ledger has one)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

# (GPU type, GPU count, the environment a shard ran in) -> what differs here now, or None
EnvironmentChange = Callable[[str, int, Sequence[str] | None], str | None]


@dataclass(frozen=True)
class PriorShard:
    """A stage shard's latest recorded result on one commit."""

    pipeline: int
    state: str  # a StageResult state
    passed_tests: tuple[str, ...]
    catalog_digest: str  # the catalog (and waives) it ran with
    # where it ran (StageResult.environment: Python, platform, GPU, distributions); None when
    # its result does not say (recorded before results carried it)
    environment: tuple[str, ...] | None = None


class History(Protocol):
    def prior_shard(self, stage: str, commit: str, pipeline: int | None) -> PriorShard | None:
        """The shard's result on ``commit`` in ``pipeline`` (None: the latest that ran it)."""


class EmptyHistory:
    """No earlier pipelines: every shard runs."""

    def prior_shard(self, stage: str, commit: str, pipeline: int | None) -> PriorShard | None:
        return None
