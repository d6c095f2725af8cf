"""Swizzled scale layout and the SwiGLU interleave: round trips and the explicit index rules."""

from __future__ import annotations

import pytest
import torch

from stagebot.harness.suites.nvfp4_moe import oracle
from stagebot.kernels import ops


@pytest.mark.parametrize(
    ("batch", "rows", "cols"),
    [((), 128, 4), ((), 1, 1), ((), 515, 16), ((3,), 200, 6), ((2, 2), 256, 128)],
)
def test_swizzle_round_trip_and_offsets(batch, rows, cols):
    sf = torch.randint(0, 256, (*batch, rows, cols), dtype=torch.uint8)
    flat = ops.swizzle_sf(sf)
    padded_rows, padded_cols = -(-rows // 128) * 128, -(-cols // 4) * 4
    assert flat.shape == (*batch, padded_rows * padded_cols)
    assert torch.equal(ops.unswizzle_sf(flat, rows, cols), sf)
    matrices = zip(sf.reshape(-1, rows, cols), flat.reshape(-1, flat.shape[-1]), strict=True)
    for matrix_sf, matrix_flat in matrices:
        assert torch.equal(oracle.read_scales(matrix_flat, rows, cols), matrix_sf)


def test_swizzle_padding_is_zero():
    flat = ops.swizzle_sf(torch.full((3, 5), 7, dtype=torch.uint8))
    assert int((flat == 7).sum()) == 15 and int((flat == 0).sum()) == flat.numel() - 15


def test_interleave_order():
    rows = torch.arange(256)
    interleaved = ops.interleave_linear_and_gate(rows, dim=0)
    expected = torch.cat([rows[0:64], rows[128:192], rows[64:128], rows[192:256]])
    assert torch.equal(interleaved, expected)
    assert torch.equal(oracle.swiglu_rows(128, "cpu"), torch.argsort(interleaved))


@pytest.mark.parametrize(("shape", "dim", "group"), [((4, 512, 8), 1, 64), ((3, 96), -1, 16)])
def test_interleave_round_trip(shape, dim, group):
    w = torch.randn(shape)
    interleaved = ops.interleave_linear_and_gate(w, group, dim=dim)
    assert not torch.equal(interleaved, w)
    assert torch.equal(ops.deinterleave_linear_and_gate(interleaved, group, dim=dim), w)
