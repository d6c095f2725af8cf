"""MoE routing tables: sort (token, k) pairs into expert tiles, permute rows in, unpermute rows out.

Expanded index = token * top_k + k. Local experts are laid out in ascending order, each padded to
a multiple of ``tile_size`` rows; inside an expert, pairs keep token order. Table entries past
the valid tiles hold TABLE_PAD (the design leaves them unspecified).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from stagebot.kernels import layouts
from stagebot.kernels.nvfp4 import BLOCK

TABLE_PAD = 2_000_000_000


class MoeSortTables(NamedTuple):
    tile_idx_to_group_idx: torch.Tensor  # int32 [max_tiles]: local expert of each tile
    tile_idx_to_mn_limit: torch.Tensor  # int32 [max_tiles]: exclusive bound of valid rows
    expanded_idx_to_permuted_idx: torch.Tensor  # int32 [T, top_k], -1 for non-local experts
    permuted_idx_to_expanded_idx: torch.Tensor  # int32 [max_tiles * tile], -1 for padding
    total_num_padded_tokens: torch.Tensor  # int32 [1] = valid tiles * tile
    num_non_exiting_tiles: torch.Tensor  # int32 [1] = valid tiles


def max_num_tiles(num_tokens: int, top_k: int, num_local_experts: int, tile_size: int) -> int:
    """Tiles enough for any routing of num_tokens * top_k pairs over the local experts."""
    expanded = num_tokens * top_k
    if expanded <= num_local_experts:
        return expanded
    return (expanded + (tile_size - 1) * num_local_experts) // tile_size


def moe_sort(
    token_selected_experts: torch.Tensor,
    local_expert_offset: int,
    num_local_experts: int,
    tile_size: int,
) -> MoeSortTables:
    """Builds the tile tables without host synchronisation (all sizes are the static maxima)."""
    device = token_selected_experts.device
    num_tokens, top_k = token_selected_experts.shape
    expanded = num_tokens * top_k
    nle = num_local_experts
    local = token_selected_experts.reshape(-1).long() - local_expert_offset
    is_local = (local >= 0) & (local < nle)
    key = torch.where(is_local, local, nle)  # non-local pairs sort last, into bucket nle

    counts = torch.zeros(nle + 1, dtype=torch.long, device=device)
    counts.scatter_add_(0, key, torch.ones_like(key))
    tiles = (counts + tile_size - 1) // tile_size
    tiles[nle:] = 0  # a slice, so a fill: `tiles[nle] = 0` copies a host scalar (no graph)
    tile_end = torch.cumsum(tiles, 0)
    tile_start = tile_end - tiles
    row_start = torch.cumsum(counts, 0) - counts
    num_tiles = tile_end[nle - 1 : nle]

    order = torch.argsort(key, stable=True)  # expanded indices in permuted order
    sorted_key = key[order]
    rank = torch.arange(expanded, device=device) - row_start[sorted_key]
    permuted = tile_start[sorted_key] * tile_size + rank
    permuted = torch.where(sorted_key < nle, permuted, -1)
    expanded_to_permuted = torch.empty(expanded, dtype=torch.long, device=device)
    expanded_to_permuted.scatter_(0, order, permuted)

    max_tiles = max_num_tiles(num_tokens, top_k, nle, tile_size)
    max_rows = max_tiles * tile_size
    # Non-local pairs write to one spare slot past the end, which is then cut off.
    permuted_to_expanded = torch.full((max_rows + 1,), -1, dtype=torch.long, device=device)
    permuted_to_expanded.scatter_(0, torch.where(permuted >= 0, permuted, max_rows), order)

    tile_idx = torch.arange(max_tiles, device=device)
    group = torch.searchsorted(tile_end[:nle], tile_idx, right=True).clamp(max=nle - 1)
    rows_left = counts[group] - (tile_idx - tile_start[group]) * tile_size
    mn_limit = tile_idx * tile_size + rows_left.clamp(max=tile_size)
    valid_tile = tile_idx < num_tiles
    return MoeSortTables(
        tile_idx_to_group_idx=torch.where(valid_tile, group, TABLE_PAD).int(),
        tile_idx_to_mn_limit=torch.where(valid_tile, mn_limit, TABLE_PAD).int(),
        expanded_idx_to_permuted_idx=expanded_to_permuted.view(num_tokens, top_k).int(),
        permuted_idx_to_expanded_idx=permuted_to_expanded[:max_rows].int(),
        total_num_padded_tokens=(num_tiles * tile_size).int(),
        num_non_exiting_tiles=num_tiles.int(),
    )


def valid_rows(
    tile_idx_to_mn_limit: torch.Tensor, num_non_exiting_tiles: torch.Tensor, tile_size: int
) -> torch.Tensor:
    """bool [num_tiles * tile]: rows inside a non-exiting tile and below its mn_limit."""
    num_rows = tile_idx_to_mn_limit.numel() * tile_size
    rows = torch.arange(num_rows, device=tile_idx_to_mn_limit.device)
    tile = rows // tile_size
    return (tile < num_non_exiting_tiles) & (rows < tile_idx_to_mn_limit[tile])


def expanded_to_permuted(
    permuted_idx_to_expanded_idx: torch.Tensor, valid: torch.Tensor, num_slots: int
) -> torch.Tensor:
    """int32 [num_slots]: the permuted row holding each expanded index, -1 where no valid row
    does (the inverse of permuted_idx_to_expanded_idx over the ``valid`` rows, no host sync)."""
    p2e = permuted_idx_to_expanded_idx
    expanded = torch.where(valid, p2e.long(), num_slots)  # invalid rows land in a spare slot
    rows = torch.full((num_slots + 1,), -1, dtype=torch.int32, device=p2e.device)
    rows.scatter_(0, expanded, torch.arange(p2e.numel(), dtype=torch.int32, device=p2e.device))
    return rows[:num_slots]


def moe_permute(
    x: torch.Tensor,
    x_scales: torch.Tensor,
    tile_idx_to_mn_limit: torch.Tensor,
    permuted_idx_to_expanded_idx: torch.Tensor,
    num_non_exiting_tiles: torch.Tensor,
    tile_size: int,
    top_k: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Copies packed rows x[expanded // top_k] and their scales into each valid permuted row.

    Rows that are not valid come out zero. Returns (packed [m, K/2], swizzled scales [m * K/16]).
    """
    num_tokens, sf_cols = x.shape[0], x.shape[1] * 2 // BLOCK
    valid = valid_rows(tile_idx_to_mn_limit, num_non_exiting_tiles, tile_size)
    source = torch.where(valid, permuted_idx_to_expanded_idx.long() // top_k, 0)
    keep = valid.unsqueeze(-1)
    rows = torch.where(keep, x[source], 0)
    scales = layouts.unswizzle_sf(x_scales.reshape(-1), num_tokens, sf_cols)
    permuted_scales = torch.where(keep, scales[source], 0)
    return rows, layouts.swizzle_sf(permuted_scales)


def moe_unpermute(
    permuted: torch.Tensor,
    expanded_idx_to_permuted_idx: torch.Tensor,
    token_final_scales: torch.Tensor,
) -> torch.Tensor:
    """out[t] = sum over k = 0, 1, ... (in order) of scale[t, k] * permuted[idx[t, k]], in fp32."""
    num_tokens, top_k = expanded_idx_to_permuted_idx.shape
    out = torch.zeros(num_tokens, permuted.shape[1], dtype=torch.float32, device=permuted.device)
    for k in range(top_k):
        idx = expanded_idx_to_permuted_idx[:, k].long()
        rows = permuted[idx.clamp(min=0)].to(torch.float32)
        term = token_final_scales[:, k : k + 1] * rows
        out += torch.where((idx >= 0).unsqueeze(-1), term, 0.0)
    return out.to(permuted.dtype)


def finalize_into(out: torch.Tensor | None, sums: torch.Tensor, out_zeroed: bool) -> torch.Tensor:
    """A finalize's bf16 ``sums`` as its caller asked: a new tensor (``out`` None), written
    into ``out``, or added into an ``out`` the caller zeroed, as the kernels' atomics add (so
    an ``out`` that is not zero gives a wrong result, here as on the GPU)."""
    if out is None:
        return sums
    return out.add_(sums) if out_zeroed else out.copy_(sums)
