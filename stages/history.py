"""What the planner may ask about earlier pipelines: a read-only History (the ledger has one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class PriorShard:
    """A stage shard's latest recorded result on one commit."""

    pipeline: int
    state: str  # a StageResult state
    passed_tests: tuple[str, ...]
    catalog_digest: str  # the catalog (and waives) it ran with


class History(Protocol):
    def prior_shard(self, stage: str, commit: str, pipeline: int | None) -> PriorShard | None:
        """The shard's result on ``commit`` in ``pipeline`` (None: the latest that ran it)."""


class EmptyHistory:
    """No earlier pipelines: every shard runs."""

    def prior_shard(self, stage: str, commit: str, pipeline: int | None) -> PriorShard | None:
        return None
