"""The checks themselves: tolerances per dtype, and no check that can pass on nothing."""

from __future__ import annotations

import torch

from stagebot.harness.suites.sharding_ir.checks import (
    collective_count_check,
    follower_rows_check,
    local_shape_check,
    numeric_check,
)


def _noisy(reference: torch.Tensor, rel: float) -> torch.Tensor:
    noise = torch.randn(reference.shape, generator=torch.Generator().manual_seed(1))
    return (reference.float() + rel * reference.float().norm() / noise.norm() * noise).to(
        reference.dtype
    )


def test_bf16_tolerance_separates_rounding_from_mistakes():
    reference = torch.randn(64, 64, generator=torch.Generator().manual_seed(0)).bfloat16()
    assert numeric_check(_noisy(reference, 0.01), reference).ok
    assert not numeric_check(_noisy(reference, 0.05), reference).ok


def test_fp32_tolerance_is_tight():
    reference = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    assert numeric_check(_noisy(reference, 1e-6), reference).ok
    assert not numeric_check(_noisy(reference, 1e-4), reference).ok


def test_nan_and_shape_mismatch_fail():
    reference = torch.ones(4, 4)
    assert not numeric_check(torch.full((4, 4), float("nan")), reference).ok
    assert not numeric_check(torch.ones(4, 2), reference).ok


def test_checks_cannot_pass_vacuously():
    gm = torch.fx.symbolic_trace(torch.nn.Identity())
    assert not collective_count_check(gm, {}).ok  # nothing expected: nothing would be checked
    assert not collective_count_check(gm, {("model.layers.0.mlp", "sum"): 1}).ok  # absent
    assert not follower_rows_check(gm, {}, {}).ok  # no followers declared
    assert not local_shape_check(gm, {}).ok  # no parameters at all
    assert not local_shape_check(gm, {"w": (2, 2)}).ok  # an expected parameter is missing
