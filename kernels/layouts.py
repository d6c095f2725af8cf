"""Memory layouts the grouped-GEMM kernels read: swizzled scale factors and interleaved SwiGLU rows.

Swizzled 128x4 scale layout: rows are padded to 128 and scale columns to 4, then the padded
[Mp, Kp] matrix is stored as (Mp/128, Kp/4, 32, 4, 4) over (m // 128, k // 4, m % 32,
(m % 128) // 32, k % 4), one flat run per matrix (per expert for batched weights).
"""

from __future__ import annotations

import torch

SF_ROW_TILE = 128
SF_COL_TILE = 4
SWIGLU_GROUP_SIZE = 64  # rows of linear, then of gate, alternating in SwiGLU weights


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def swizzled_sf_size(rows: int, cols: int) -> int:
    """Elements of one swizzled scale matrix holding ``rows`` x ``cols`` scales."""
    return _round_up(rows, SF_ROW_TILE) * _round_up(cols, SF_COL_TILE)


def swizzle_sf(sf: torch.Tensor) -> torch.Tensor:
    """[..., rows, cols] -> [..., swizzled_sf_size(rows, cols)] (padding is zero)."""
    *batch, rows, cols = sf.shape
    mp, kp = _round_up(rows, SF_ROW_TILE), _round_up(cols, SF_COL_TILE)
    padded = torch.nn.functional.pad(sf, (0, kp - cols, 0, mp - rows))
    tiles = padded.reshape(*batch, mp // 128, 4, 32, kp // 4, 4)
    n = len(batch)
    order = (*range(n), n, n + 3, n + 2, n + 1, n + 4)
    return tiles.permute(order).reshape(*batch, mp * kp)


def unswizzle_sf(flat: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """[..., swizzled_sf_size(rows, cols)] -> [..., rows, cols]."""
    *batch, _ = flat.shape
    mp, kp = _round_up(rows, SF_ROW_TILE), _round_up(cols, SF_COL_TILE)
    tiles = flat.reshape(*batch, mp // 128, kp // 4, 32, 4, 4)
    n = len(batch)
    order = (*range(n), n, n + 3, n + 2, n + 1, n + 4)
    return tiles.permute(order).reshape(*batch, mp, kp)[..., :rows, :cols]


def interleave_linear_and_gate(w: torch.Tensor, group_size: int, dim: int) -> torch.Tensor:
    """[.., linear; gate, ..] along ``dim`` -> lin[0:g], gate[0:g], lin[g:2g], gate[g:2g], ..."""
    dim = dim % w.dim()
    grouped = w.unflatten(dim, (2, -1, group_size))
    return grouped.transpose(dim, dim + 1).flatten(dim, dim + 2)


def deinterleave_linear_and_gate(w: torch.Tensor, group_size: int, dim: int) -> torch.Tensor:
    """Inverse of interleave_linear_and_gate."""
    dim = dim % w.dim()
    grouped = w.unflatten(dim, (-1, 2, group_size))
    return grouped.transpose(dim, dim + 1).flatten(dim, dim + 2)
