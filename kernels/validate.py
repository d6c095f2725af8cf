"""Argument validation for the op API; each failure raises KernelArgumentError."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

from stagebot.kernels.errors import KernelArgumentError


def fail(name: str, got: object, rule: str) -> None:
    raise KernelArgumentError(f"argument `{name}` {got}; {rule}")


def require(ok: bool, name: str, got: object, rule: str) -> None:
    if not ok:
        fail(name, got, rule)


def check_tensor(
    name: str,
    t: object,
    dtypes: torch.dtype | Sequence[torch.dtype],
    *,
    ndim: int | None = None,
    min_ndim: int | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Checks the type, dtype, rank and device of one tensor argument and returns it."""
    require(isinstance(t, torch.Tensor), name, f"is a {type(t).__name__}", "it must be a tensor")
    allowed = (dtypes,) if isinstance(dtypes, torch.dtype) else tuple(dtypes)
    require(
        t.dtype in allowed,
        name,
        f"has dtype {t.dtype}",
        f"it must be {' or '.join(str(d) for d in allowed)}",
    )
    if ndim is not None:
        require(t.dim() == ndim, name, f"has shape {tuple(t.shape)}", f"it must have {ndim} dims")
    if min_ndim is not None:
        require(
            t.dim() >= min_ndim,
            name,
            f"has shape {tuple(t.shape)}",
            f"it must have at least {min_ndim} dims",
        )
    if device is not None:
        require(
            t.device == device,
            name,
            f"is on {t.device}",
            f"it must be on {device}, with the other tensors",
        )
    return t


def check_shape(name: str, t: torch.Tensor, expected: Iterable[int], why: str) -> None:
    expected = tuple(expected)
    require(
        tuple(t.shape) == expected,
        name,
        f"has shape {tuple(t.shape)}",
        f"it must be {expected} ({why})",
    )


def check_numel(name: str, t: torch.Tensor, expected: int, why: str) -> None:
    require(
        t.numel() == expected, name, f"has {t.numel()} elements", f"it must have {expected} ({why})"
    )


def check_multiple(name: str, value: int, multiple: int, what: str) -> None:
    require(
        value % multiple == 0,
        name,
        f"gives {what} = {value}",
        f"it must be a multiple of {multiple}",
    )


def check_choice(name: str, value: object, choices: Sequence[object]) -> None:
    require(value in choices, name, f"is {value!r}", f"it must be one of {list(choices)}")


def check_positive_int(name: str, value: object) -> int:
    require(
        isinstance(value, int) and not isinstance(value, bool) and value > 0,
        name,
        f"is {value!r}",
        "it must be a positive int",
    )
    return value


def check_finite_positive(name: str, value: float | torch.Tensor) -> None:
    """A global scale (one value or a tensor of them): finite and > 0. One host sync."""
    if isinstance(value, torch.Tensor):
        if value.numel() == 0:
            return
        v = value.double()
        low, high, bad = torch.stack(
            [v.amin(), v.amax(), (~torch.isfinite(v) | (v <= 0)).sum().double()]
        ).tolist()
        got = f"holds values in [{low}, {high}]" if bad else ""
        require(bad == 0, name, got, "every global scale must be finite and > 0")
    else:
        require(
            math.isfinite(value) and value > 0,
            name,
            f"is {value!r}",
            "a global scale must be finite and > 0",
        )


def check_index_range(
    name: str, values: torch.Tensor, low: int, high: int, rule: str, where: str = ""
) -> None:
    """Every element of ``values`` in [low, high); ``rule`` says what it indexes. One host sync."""
    if values.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.stack([values.amin(), values.amax()]).tolist())
    require(
        lo >= low and hi < high,
        name,
        f"holds values in [{lo}, {hi}]{where}",
        f"they must lie in [{low}, {high}) ({rule})",
    )
