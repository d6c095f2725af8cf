"""The suite's tolerance checks; each returns a Verdict so negative controls can assert failure.

Tolerances follow the design's tests: quantiser bytes >= 99.9% equal; SwiGLU output and scale
bytes >= 95% equal; plain GEMM rows within bf16 assert_close defaults; finalize > 99% of
elements within rtol 1.6e-2, atol 1e-5; fused_moe relative RMSE < 2e-2. A comparison of nothing
(no elements) fails: it would pass any output.

The design checks finalize against grouped GEMM + unpermute, whose rows are rounded to bf16; the
suite's oracle is exact (float64). A deterministic finalize rounds once, so its rtol is of the
exact sum. Atomic finalize rounds every term and partial sum to bf16, which where a token's
terms cancel errs by more than 1.6e-2 of the sum (2.3% of the elements in the H200's cases,
4% in the CPU emulation at top_k 2); its rtol is of the sum of the terms' magnitudes, the bound
such a sum obeys.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

QUANTIZER_MIN_MATCH = 0.999
SWIGLU_MIN_MATCH = 0.95
BF16_RTOL, BF16_ATOL = 1.6e-2, 1e-5
FINALIZE_MIN_CLOSE = 0.99
FUSED_MOE_MAX_RMSE = 2e-2


@dataclass(frozen=True)
class Verdict:
    ok: bool
    detail: str


def _nothing_compared(actual: torch.Tensor, what: str) -> Verdict | None:
    if actual.numel():
        return None
    return Verdict(False, f"{what}: nothing compared (shape {tuple(actual.shape)})")


def bytes_match(
    actual: torch.Tensor, expected: torch.Tensor, min_rate: float, what: str
) -> Verdict:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    if empty := _nothing_compared(actual, what):
        return empty
    rate = (actual == expected).double().mean().item()
    return Verdict(rate >= min_rate, f"{what}: {rate:.5%} of bytes equal (need >= {min_rate:.3%})")


def bytes_match_per_group(
    actual: torch.Tensor, expected: torch.Tensor, groups: torch.Tensor, min_rate: float, what: str
) -> Verdict:
    """bytes_match within every group of rows (e.g. each tile): a bug in one tile cannot hide
    in the average."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    if empty := _nothing_compared(actual, what):
        return empty
    equal = (actual == expected).reshape(actual.shape[0], -1).double().mean(dim=1)
    worst_rate, worst_group = 2.0, -1
    for group in groups.unique().tolist():
        rate = equal[groups == group].mean().item()
        if rate < worst_rate:
            worst_rate, worst_group = rate, group
    return Verdict(
        worst_rate >= min_rate,
        f"{what}: worst group {worst_group} has {worst_rate:.5%} of bytes equal "
        f"(need >= {min_rate:.3%} in each)",
    )


def close_fraction(
    actual: torch.Tensor,
    expected: torch.Tensor,
    min_fraction: float,
    what: str,
    rtol: float = BF16_RTOL,
    atol: float = BF16_ATOL,
    magnitude: torch.Tensor | None = None,
) -> Verdict:
    """Fraction of elements with |a - e| <= atol + rtol * m (NaN never counts as close).

    m is |e|, or ``magnitude`` where given: for a sum of rounded terms, the sum of the terms'
    magnitudes (the textbook bound of a floating-point sum's error scales with it).
    """
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    if empty := _nothing_compared(actual, what):
        return empty
    a, e = actual.double(), expected.double()
    m = e.abs() if magnitude is None else magnitude.double()
    close = (a - e).abs() <= atol + rtol * m
    fraction = int(close.sum()) / close.numel()  # exact counts: a CUDA mean of ones can be < 1
    worst = ((a - e).abs() - rtol * m).nan_to_num(torch.inf).max().item()
    passed = fraction > min_fraction if min_fraction < 1 else bool(close.all())
    return Verdict(
        passed,
        f"{what}: {fraction:.4%} of elements within rtol {rtol}"
        f"{'' if magnitude is None else ' of the terms magnitudes'}, atol {atol} "
        f"(need {'all' if min_fraction >= 1 else f'> {min_fraction:.0%}'}); "
        f"worst excess {worst:.3g}",
    )


def all_close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> Verdict:
    return close_fraction(actual, expected, 1.0, what)


def relative_rmse(
    actual: torch.Tensor, expected: torch.Tensor, max_rmse: float, what: str
) -> Verdict:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    if empty := _nothing_compared(actual, what):
        return empty
    a, e = actual.double(), expected.double()
    rmse = ((a - e).norm() / e.norm().clamp(min=1e-300)).item()
    ok = rmse < max_rmse  # NaN fails
    return Verdict(ok, f"{what}: relative RMSE {rmse:.3e} (need < {max_rmse:.0e})")
