"""What several blocks share: the local-shape type, the closed-form split size, a colwise
projection."""

from __future__ import annotations

from torch import Tensor, nn

from stagebot.harness.suites.sharding_ir import hints

Shapes = dict[str, tuple[int, ...] | None]  # parameter name -> local shape (None: dropped)


def split_size(size: int, parts: int, min_size: int = 1) -> int:
    """Closed-form local size: an even share, or one ``min_size`` unit if parts outnumber units."""
    return max(size // parts, min_size)


def colwise(x: Tensor, proj: nn.Linear, pieces: list[int] | None, min_local: int = 1, kind="mlp"):
    """A colwise-hinted projection; a fused weight (``pieces``) comes back split into its pieces."""
    y = hints.linear(x, proj.weight, proj.bias, "colwise", pieces, min_local, kind)
    return hints.split_with_sizes(y, pieces, -1, True) if pieces else y
