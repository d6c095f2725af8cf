"""The suite's tolerance checks; each returns a Verdict so negative controls can assert failure.

Byte checks follow the design's tests: the quantiser's bytes >= 99.9% equal to the oracle's. The
GEMM outputs are checked against the float64 oracle with a bound derived from the rounding the
backend that ran can do (``error_bound``), so that a 1% error fails wherever the bound is below
1% (it is everywhere but atomic bf16 sums of many terms):

- the GEMM's reduction over K products, |error| <= lambda * sqrt(K) * unit * sum_i |a_i w_i|:
  the probabilistic bound of a sum whose roundings are independent (Higham and Mary, SIAM J. Sci.
  Comput. 2019), with lambda = 8 (exceeded with probability below 3e-14 per element). ``unit`` is
  one fp32 rounding for the reference (torch fp32 matmul, round to nearest) and two for the cute
  kernels (fp16 WGMMA with fp32 accumulators: the tensor cores align and truncate, which loses up
  to one unit in the last place instead of half). The operands are exact in both (e2m1 * e4m3
  values; kernels/cute/grouped_gemm.py), so the reduction is the only error before the
  epilogue; the oracle's own float64 error is negligible;
- alpha = 1 / (gs_a * gs_b) computed in fp32 and applied in fp32: 3 fp32 roundings;
- the epilogue's roundings, per path (``Rounding``): one bf16 rounding of the result (plain
  GEMM rows, deterministic sums in fp32), or a bf16 rounding of every term and partial sum
  (atomic finalize: bf16 atomics), bounded by the sum of the terms' magnitudes.

The SwiGLU output is NVFP4 bytes: both backends reproduce the spec's fp32 quantisation steps
(the cute kernels' bytes equal the reference's on the H200, NOTES.md), so bytes differ from the
float64 oracle's only where the fp32 GEMM puts a value on the other side of a rounding boundary:
>= 99% of bytes must be equal (the design's 95% would pass scales 1% off). A comparison of
nothing (no elements) fails: it would pass any output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

QUANTIZER_MIN_MATCH = 0.999
SWIGLU_MIN_MATCH = 0.99
BF16_RTOL, BF16_ATOL = 1.6e-2, 1e-5
U_FP32 = 2.0**-24  # unit roundoff: the largest relative error of one rounding to nearest
U_BF16 = 2.0**-8
LAMBDA = 8.0
SECOND_ORDER = 1 + 2.0**-6  # covers the products of first-order terms the bound leaves out
# fused_moe's second GEMM reads activations the backend quantised from its own fp32 SwiGLU:
# where that value sits within the GEMM's error of a rounding boundary, one e2m1 code (or a
# block's scale) can differ from the oracle's, moving that token's row by about 0.3%. 1e-3 of
# relative RMSE leaves room for such a code in about one compared token in eight. (Measured
# with the reference on the CPU matrix: 1.6e-3 to 2.5e-3 in all, the bf16 roundings' share.)
ACTIVATION_CODE_RMSE = 1e-3
SAMPLE_SPREAD = 1.25


@dataclass(frozen=True)
class Accumulation:
    """How a backend's GEMM sums its K products: ``unit`` bounds one step's rounding."""

    unit: float

    def bound(self, k: int) -> float:
        """Relative to sum_i |a_i w_i| (see the module's docstring)."""
        return LAMBDA * math.sqrt(k) * self.unit


ACCUMULATION = {"reference": Accumulation(U_FP32), "cute": Accumulation(2 * U_FP32)}


def accumulation_of(backend: str) -> Accumulation:
    if backend not in ACCUMULATION:
        raise ValueError(
            f"backend {backend!r} has no error model: the suite bounds {sorted(ACCUMULATION)}"
        )
    return ACCUMULATION[backend]


@dataclass(frozen=True)
class Rounding:
    """An epilogue's roundings: ``final`` relative to the result, ``per_magnitude`` relative to
    the sum of its terms' magnitudes (alpha's 3 fp32 roundings included)."""

    final: float
    per_magnitude: float

    @classmethod
    def rows(cls) -> Rounding:
        """grouped_gemm: fp32 rows, rounded once to bf16."""
        return cls(U_BF16, 3 * U_FP32)

    @classmethod
    def fp32_sum(cls, top_k: int, bf16_rows: bool = False) -> Rounding:
        """A token's rows (fp32, or bf16 with ``bf16_rows``) times its router weights, summed in
        fp32 in k order, rounded once to bf16: deterministic finalize, unpermute."""
        rows = U_BF16 if bf16_rows else 0.0
        return cls(U_BF16, rows + (top_k + 4) * U_FP32)

    @classmethod
    def bf16_atomics(cls, top_k: int) -> Rounding:
        """Each term rounded to bf16 and added by a bf16 atomic (the first add, into zero,
        is exact): top_k bf16 roundings of at most the terms' magnitudes."""
        return cls(0.0, top_k * U_BF16 + 4 * U_FP32)


def summed_rounding(ran: str, top_k: int, atomic: bool, bf16_rows: bool = False) -> Rounding:
    """The epilogue of a sum of a token's rows: the cute kernels' atomic finalize adds bf16
    terms with bf16 atomics; every other path sums in fp32 and rounds once."""
    if atomic and ran == "cute":
        return Rounding.bf16_atomics(top_k)
    return Rounding.fp32_sum(top_k, bf16_rows)


def error_bound(
    expected: torch.Tensor,
    magnitude: torch.Tensor,
    products: torch.Tensor,
    k: int,
    accumulation: Accumulation,
    rounding: Rounding,
) -> torch.Tensor:
    """float64, per element: the most the backend's result can differ from the exact one."""
    return SECOND_ORDER * (
        rounding.final * expected.double().abs()
        + rounding.per_magnitude * magnitude.double()
        + accumulation.bound(k) * products.double()
    )


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
    equal = (actual == expected).reshape(actual.shape[0], -1)
    # Exact counts per group, one pass (a loop over a large case's ~600 tiles syncs per tile).
    ids, group_of_row = groups.unique(return_inverse=True)
    equal_bytes = torch.zeros(ids.numel(), dtype=torch.long, device=equal.device)
    equal_bytes.index_add_(0, group_of_row, equal.sum(dim=1))
    compared = torch.bincount(group_of_row, minlength=ids.numel()) * equal.shape[1]
    rates = equal_bytes.double() / compared.double()
    worst = int(rates.argmin())  # the first group of the lowest rate
    worst_rate, worst_group = rates[worst].item(), ids[worst].item()
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


def within_bound(
    actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor, what: str
) -> Verdict:
    """Every element within its error bound (NaN never is)."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    if empty := _nothing_compared(actual, what):
        return empty
    error = (actual.double() - expected.double()).abs().nan_to_num(torch.inf)
    outside = int((error > bound).sum())
    worst = (error / bound.clamp(min=1e-300)).max().item()
    return Verdict(
        outside == 0,
        f"{what}: {outside} of {error.numel()} elements outside the backend's error bound "
        f"(worst at {worst:.3g}x the bound)",
    )


def rmse_within_bound(
    actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor, allowance: float, what: str
) -> Verdict:
    """Relative RMSE below what roundings within ``bound`` give, plus ``allowance``.

    One rounding errs uniformly within its bound (to nearest: +-half an ulp; truncation: up to
    one ulp, counted as two units), so independent roundings have an RMS of at most the bound's
    RMS / sqrt(3); SAMPLE_SPREAD covers the spread of that RMS over the compared elements.
    """
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    if empty := _nothing_compared(actual, what):
        return empty
    a, e = actual.double(), expected.double()
    norm = e.norm().clamp(min=1e-300)
    rounding_rms = SAMPLE_SPREAD * (bound.norm() / norm).item() / math.sqrt(3)
    rmse, limit = ((a - e).norm() / norm).item(), rounding_rms + allowance
    return Verdict(rmse < limit, f"{what}: relative RMSE {rmse:.3e} (need < {limit:.3e})")
