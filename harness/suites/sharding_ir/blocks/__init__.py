"""Block plug-ins: layer compositions, attention, norm and feed-forward variants, each a module
of this package that registers its builder by name (``@register("ffn", "gated_mlp")``). A
family's entry names the blocks it composes (``family.Block``); the decoder builds its layers by
kind and never names a block, so a new block is a new module here and nothing else: every module
of the package is imported (found with ``pkgutil``) before the first lookup.

Kinds and what their builders take and return:

- ``layer``: ``(arch, layer, **params)``, forward ``(x, cos, sin)``: one decoder layer, which
  builds the family's attention, feed-forward block and norms and composes them (sequential,
  parallel ...), with the collectives the composition needs.
- ``norm``: ``(arch, size, *, across_ranks=False, **params)``; a norm ``across_ranks`` normalises
  a vector split over TP ranks (q/k over all heads): its forward takes ``follows``, the weight
  whose rows its own weight follows.
- ``attention``: ``(arch, layer, *, reduce=True, **params)``, forward ``(x, cos, sin)``.
- ``ffn``: ``(arch, layer, *, reduce=True, **params)``, forward ``(x)``; a sparse block's
  builder may return None for a layer that keeps the dense MLP.

``reduce=False`` (passed by a layer block, never by an entry): the block leaves its output a
partial sum over TP ranks, for the layer to reduce together with another branch's. A builder
may take a base block's parameters through ``**params`` and pass them on: registered with
``extends="attention"``, its parameters are its own and the base's.

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

KINDS = ("layer", "norm", "attention", "ffn")
_BUILDERS: dict[str, tuple[str, Callable]] = {}  # name -> (kind, builder)
_EXTENDS: dict[str, str] = {}  # name -> the block whose parameters it takes on too
LAYER_ARGS = ("reduce",)  # what a layer block may pass besides the entry's parameters
_discovered = False


def register(kind: str, name: str, extends: str | None = None) -> Callable[[Callable], Callable]:
    """Register the decorated builder as block ``name`` of ``kind`` (taking ``extends``'s
    parameters too, through its ``**params``)."""
    if kind not in KINDS:
        raise ShardingIRError(f"block {name!r}: unknown kind {kind!r}; kinds: {', '.join(KINDS)}.")

    def add(builder: Callable) -> Callable:
        if name in _BUILDERS and _BUILDERS[name][1] is not builder:
            raise ShardingIRError(f"block {name!r} is registered already.")
        _BUILDERS[name] = (kind, builder)
        if extends:
            _EXTENDS[name] = extends
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


def parameters(name: str) -> list[str]:
    """The parameters an entry may give block ``name``: its builder's keyword-only ones and,
    where it extends another block, that block's."""
    _discover()
    accepted = inspect.signature(_BUILDERS[name][1]).parameters
    own = [n for n, p in accepted.items() if p.kind is p.KEYWORD_ONLY and n not in LAYER_ARGS]
    return own + (parameters(_EXTENDS[name]) if name in _EXTENDS else [])


def _takes(name: str, arg: str) -> bool:
    """Whether block ``name``'s builder takes ``arg``, itself or through the block it extends."""
    accepted = inspect.signature(_BUILDERS[name][1]).parameters
    if arg in accepted:
        return True
    passes_on = any(p.kind is p.VAR_KEYWORD for p in accepted.values())
    return passes_on and name in _EXTENDS and _takes(_EXTENDS[name], arg)


def build(kind: str, use: BlockUse, *args, **extra):
    """Block ``use`` (of ``kind``) built with ``args``, its parameters and ``extra`` (what a layer
    block passes: ``LAYER_ARGS``)."""
    _discover()
    names = [n for n, (k, _) in _BUILDERS.items() if k == kind]
    if use.name not in names:
        raise ShardingIRError(
            f"unknown {kind} block {use.name!r}; registered {kind} blocks: {', '.join(names)}."
            + did_you_mean(use.name, names)
        )
    builder = _BUILDERS[use.name][1]
    params = {k: v for k, v in use.params.items() if k != "module"}
    known = parameters(use.name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ShardingIRError(
            f"{kind} block {use.name!r} has no parameter {', '.join(map(repr, unknown))}; "
            f"its parameters: {', '.join(known)}."
        )
    refused = sorted(k for k in extra if not _takes(use.name, k))
    if refused:
        raise ShardingIRError(
            f"{kind} block {use.name!r} takes no {', '.join(map(repr, refused))} from its layer: "
            "a layer that reduces two branches at once needs blocks that leave their output "
            "unreduced (reduce=False); compose it otherwise (the layer's fused_reduce=False)."
        )
    return builder(*args, **params, **extra)
