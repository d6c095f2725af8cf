"""Block plug-ins: attention, norm and feed-forward variants, each a module of this package that
registers its builder by name (``@register("ffn", "gated_mlp")``). A family's entry names the
blocks it composes (``family.Block``); the decoder builds them by kind and never names one, so a
new block is a new module here and nothing else: every module of the package is imported (found
with ``pkgutil``) before the first lookup.

Kinds and what their builders take and return:

- ``norm``: ``(arch, size, *, across_ranks=False, **params)``; a norm ``across_ranks`` normalises
  a vector split over TP ranks (q/k over all heads): its forward takes ``follows``, the weight
  whose rows its own weight follows.
- ``attention``: ``(arch, layer, **params)``, forward ``(x, cos, sin)``.
- ``ffn``: ``(arch, layer, **params)``, forward ``(x)``; a sparse block's builder may return
  None for a layer that keeps the dense MLP.

A block's module states, besides its forward, what the structural checks expect of it once
sharded: ``local_shapes(dc)`` (its parameters', its parts' too), ``collectives`` (reduce op ->
how many its own forward issues) and ``follows`` (its parameter -> the parameter whose row split
it follows), in closed form, independently of how the sharder computes them.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable

from stagebot.harness.suites.sharding_ir.errors import ShardingIRError, did_you_mean
from stagebot.harness.suites.sharding_ir.family import BlockUse

KINDS = ("norm", "attention", "ffn")
_BUILDERS: dict[str, tuple[str, Callable]] = {}  # name -> (kind, builder)
_discovered = False


def register(kind: str, name: str) -> Callable[[Callable], Callable]:
    """Register the decorated builder as block ``name`` of ``kind``."""
    if kind not in KINDS:
        raise ShardingIRError(f"block {name!r}: unknown kind {kind!r}; kinds: {', '.join(KINDS)}.")

    def add(builder: Callable) -> Callable:
        if name in _BUILDERS and _BUILDERS[name][1] is not builder:
            raise ShardingIRError(f"block {name!r} is registered already.")
        _BUILDERS[name] = (kind, builder)
        return builder

    return add


def _discover() -> None:
    global _discovered
    if not _discovered:
        for module in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{module.name}")
        _discovered = True


def registered() -> dict[str, str]:
    """Block name -> kind, for every block module of the package."""
    _discover()
    return {name: kind for name, (kind, _) in _BUILDERS.items()}


def build(kind: str, use: BlockUse, *args, **extra):
    """Block ``use`` (of ``kind``) built with ``args``, its parameters and ``extra``."""
    _discover()
    names = [n for n, (k, _) in _BUILDERS.items() if k == kind]
    if use.name not in names:
        raise ShardingIRError(
            f"unknown {kind} block {use.name!r}; registered {kind} blocks: {', '.join(names)}."
            + did_you_mean(use.name, names)
        )
    builder = _BUILDERS[use.name][1]
    params = {k: v for k, v in use.params.items() if k != "module"}
    accepted = inspect.signature(builder).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
        unknown = sorted(set(params) - set(accepted))
        if unknown:
            known = [n for n, p in accepted.items() if p.kind is p.KEYWORD_ONLY]
            raise ShardingIRError(
                f"{kind} block {use.name!r} has no parameter {', '.join(map(repr, unknown))}; "
                f"its parameters: {', '.join(known)}."
            )
    return builder(*args, **params, **extra)
