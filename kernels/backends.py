"""Backend registry and dispatch for the grouped-GEMM ops and fused_moe.

A backend declares the ops it implements, a priority and ``can_implement(op, **args) -> (ok,
reason)``. ``backend="auto"`` runs the highest-priority backend that can implement the call;
naming a backend that cannot is a BackendUnavailableError, never a silent fallback. Every
dispatch is recorded into the logs opened with ``record_dispatch()``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from stagebot.kernels.errors import BackendUnavailableError, KernelArgumentError

AUTO = "auto"
DISPATCHED_OPS = ("grouped_gemm", "grouped_gemm_swiglu", "grouped_gemm_finalize", "fused_moe")
# Modules that register a backend on import, loaded before the first lookup.
BUILTIN_BACKEND_MODULES = (
    "stagebot.kernels.reference",
    "stagebot.kernels.cute.backend",
    "stagebot.kernels.cute.backend_sm100",
)


@dataclass(frozen=True)
class Backend:
    name: str
    priority: int  # "auto" tries higher priorities first
    implementations: Mapping[str, Callable[..., Any]]
    can_implement: Callable[..., tuple[bool, str]]  # (op, **args) -> (ok, reason if not ok)
    devices: tuple[str, ...] = ("cpu", "cuda")  # torch device types it can ever run on

    def check(self, op: str, args: Mapping[str, Any]) -> tuple[bool, str]:
        if op not in self.implementations:
            return False, f"it does not implement {op} (only {sorted(self.implementations)})"
        return self.can_implement(op, **args)


_registry: dict[str, Backend] = {}
_open_logs: list[list[tuple[str, str]]] = []


def register(backend: Backend) -> None:
    unknown = sorted(set(backend.implementations) - set(DISPATCHED_OPS))
    if unknown:
        raise ValueError(f"backend {backend.name!r} implements unknown ops {unknown}")
    _registry[backend.name] = backend


def registered() -> list[Backend]:
    """Registered backends, highest priority first."""
    for module in BUILTIN_BACKEND_MODULES:
        importlib.import_module(module)
    return sorted(_registry.values(), key=lambda b: -b.priority)


def resolve(op: str, backend: str, args: Mapping[str, Any]) -> Backend:
    candidates = registered()
    if backend == AUTO:
        reasons = []
        for candidate in candidates:
            ok, why = candidate.check(op, args)
            if ok:
                return candidate
            reasons.append(f"{candidate.name}: {why}")
        raise BackendUnavailableError(
            f"argument `backend` is 'auto', but no backend can implement {op} for this call "
            f"({'; '.join(reasons)})"
        )
    by_name = {b.name: b for b in candidates}
    if backend not in by_name:
        raise KernelArgumentError(
            f"argument `backend` is {backend!r}; it must be 'auto' or one of {sorted(by_name)}"
        )
    ok, why = by_name[backend].check(op, args)
    if not ok:
        raise BackendUnavailableError(
            f"argument `backend` is {backend!r}, which cannot implement {op} for this call: {why}"
        )
    return by_name[backend]


def dispatch(op: str, backend: str, **args: Any) -> Any:
    chosen = resolve(op, backend, args)
    for log in _open_logs:
        log.append((op, chosen.name))
    return chosen.implementations[op](**args)


@contextmanager
def record_dispatch() -> Iterator[list[tuple[str, str]]]:
    """Collects (op, backend) for every dispatch made inside the block, nested ones included."""
    log: list[tuple[str, str]] = []
    _open_logs.append(log)
    try:
        yield log
    finally:
        del _open_logs[next(i for i, open_log in enumerate(_open_logs) if open_log is log)]
