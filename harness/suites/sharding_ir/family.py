"""What a model family's decoder has, as data: the spec a registry entry carries (``ArchSpec``:
which blocks, by name, with which parameters, the layer's composition among them; the config
names of the sizes every decoder has; the decoder's multipliers), and the plain numbers (``Arch``)
it resolves to for one HF config, from which the IR is built.

A parameter is either fixed for the family (a bool, a number, a string) or held by the HF config
under a name of the family's choosing (``Attr("qkv_bias")``, with a default where the config
class may lack it: ``Attr("attention_bias", default=False)``; ``Item("rope_parameters",
"partial_rotary_factor", default=1.0)`` for a key of a dict the config holds), or computed from
such values (``Attr("hidden_size") ** 0.5``): the spec maps those names, so neither the blocks nor
the suite's checks ever name a config key. The sizes (hidden size, heads, KV heads, head_dim, the
norms' epsilon, RoPE's base and rotary fraction ...) are ``ArchSpec`` fields too, each defaulting to
HF's most common name (``rms_norm_eps``); an entry whose config class says ``layer_norm_eps``
declares it. A name the config lacks, without a default, fails naming the entry, the field and
the name; a value of the wrong kind (a negative epsilon, a fraction above 1) fails the same way.
Kept light: no torch (the blocks themselves live in ``blocks/``, found by name when a model is
built).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from stagebot.harness.suites.sharding_ir.errors import ShardingIRError


class _Missing(Enum):
    """No default: the config must hold the name (an Enum member: the same after pickling)."""

    MISSING = "missing"


MISSING = _Missing.MISSING


def _lacks(where: str, config, name: str) -> ShardingIRError:
    return ShardingIRError(
        f"{where} reads {type(config).__name__}.{name}, which that config class lacks: declare the "
        "name it uses for this (Attr('...')) or a default (Attr(name, default=...))."
    )


class _Arithmetic:
    """``*``, ``/`` and ``**`` with numbers or other config values build a ``Formula``: a value
    computed from the config (``Attr("hidden_size") ** 0.5``, ``1 / Attr("logits_scaling")``)
    that stays plain, comparable and picklable data, as a spec must be to reach the ranks."""

    def __mul__(self, other):
        return Formula(operator.mul, (self, other))

    def __rmul__(self, other):
        return Formula(operator.mul, (other, self))

    def __truediv__(self, other):
        return Formula(operator.truediv, (self, other))

    def __rtruediv__(self, other):
        return Formula(operator.truediv, (other, self))

    def __pow__(self, other):
        return Formula(operator.pow, (self, other))


@dataclass(frozen=True)
class Attr(_Arithmetic):
    """A value held by the HF config, under this attribute name in the family's config class;
    ``default`` where the class may lack it (None is a default too)."""

    name: str
    default: object = MISSING

    def read(self, config, where: str):
        if hasattr(config, self.name):
            return getattr(config, self.name)
        if self.default is MISSING:
            raise _lacks(where, config, self.name)
        return self.default


@dataclass(frozen=True)
class Item(_Arithmetic):
    """``config.<name>[key]``: a key of a dict the config holds (``rope_parameters``)."""

    name: str
    key: str
    default: object = MISSING

    def read(self, config, where: str):
        held = getattr(config, self.name, None) or {}
        if self.key in held:
            return held[self.key]
        if self.default is MISSING:
            raise _lacks(where, config, f"{self.name}[{self.key!r}]")
        return self.default


@dataclass(frozen=True)
class Formula(_Arithmetic):
    """``op(*operands)``, each operand a number, an ``Attr`` or another ``Formula``."""

    op: Callable
    operands: tuple

    def read(self, config, where: str):
        return self.op(*(value(operand, config, where) for operand in self.operands))


Value = bool | int | float | str | Attr | Item | Formula | None  # fixed, read or computed


def value(feature: Value, config, where: str = "the family's spec"):
    """``feature`` for ``config``; ``where`` (the entry and field) names it in an error."""
    return feature.read(config, where) if isinstance(feature, Attr | Item | Formula) else feature


@dataclass(frozen=True, init=False)
class Block:
    """A block plug-in by its registered name (``blocks/``), with the parameters the family gives
    it: ``Block("attention", qk_norm="head", bias=Attr("attention_bias"))``. Parameters are
    values (fixed, read or computed from the config); the block's builder takes them by name."""

    name: str
    params: tuple[tuple[str, Value], ...]

    def __init__(self, name: str, /, **params: Value) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "params", tuple(sorted(params.items())))

    def param(self, key: str, default: Value = None) -> Value:
        return dict(self.params).get(key, default)

    def but(self, **params: Value) -> Block:
        """This block with some parameters replaced or added."""
        return Block(self.name, **(dict(self.params) | params))

    def resolve(self, config, where: str = "the family's spec") -> BlockUse:
        return BlockUse(self.name, {k: value(v, config, f"{where}.{k}") for k, v in self.params})


@dataclass(frozen=True)
class BlockUse:
    """A block with its parameters read from one config: what its builder is called with."""

    name: str
    params: dict = field(hash=False)


def _positive_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0


# ArchSpec field -> (what its value must be, the check): the checks of the values read.
_CHECKS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "hidden_size": ("a positive int", _positive_int),
    "num_layers": ("a positive int", _positive_int),
    "num_heads": ("a positive int", _positive_int),
    "num_kv_heads": ("a positive int", _positive_int),  # dividing the heads: checked after
    "head_dim": ("a positive int, or None for hidden_size / heads", _positive_int),
    "intermediate_size": ("a positive int", _positive_int),
    "vocab_size": ("a positive int", _positive_int),
    "tied_embeddings": ("a bool", lambda x: isinstance(x, bool)),
    "norm_eps": ("a float in (0, 1)", lambda x: isinstance(x, float | int) and 0 < x < 1),
    "rope_theta": ("a positive number", lambda x: isinstance(x, float | int) and x > 0),
    "rotary_fraction": ("a number in (0, 1]", lambda x: isinstance(x, float | int) and 0 < x <= 1),
    "lm_head_bias": ("a bool", lambda x: isinstance(x, bool)),
}


@dataclass(frozen=True)
class ArchSpec:
    """The decoder of a family: its blocks, how a layer composes them, its config's names.

    ``layer`` names a registered layer block, the layer's composition: ``sequential`` (attention
    then the feed-forward block, each a residual branch; its ``norms`` parameter the placement:
    ``pre``, ``post`` or ``sandwich``) or ``parallel`` (both branches off the layer's input, one
    residual, one fused all-reduce). ``attention`` (the layer's ``self_attn``), ``mlp`` (the
    dense feed-forward block, ``mlp``), ``moe`` (the sparse one where the family has it: its
    builder says which layers keep the dense ``mlp``; its ``module`` parameter names the layer's
    attribute) and ``norm`` (every norm, q/k norms too) name registered blocks; ``final_norm`` is
    the model's last norm's module name (``model.norm``), ``lm_head_bias`` whether the head has
    a bias. ``activation``: the gate's in every gated MLP (dense, routed and shared experts). The
    multipliers scale the embeddings, each residual branch (attention and feed-forward outputs
    before they are added) and the logits, which ``logits_softcap`` (None: none) then caps as
    ``cap * tanh(x / cap)``. The size fields name where the config holds each size.
    """

    layer: Block = Block("sequential")
    attention: Block = Block("attention")
    mlp: Block = Block("gated_mlp")
    moe: Block | None = None
    norm: Block = Block("rms_norm")
    final_norm: str = "norm"
    lm_head_bias: Value = False
    activation: Value = "silu"
    embedding_multiplier: Value = 1.0
    residual_multiplier: Value = 1.0
    logits_multiplier: Value = 1.0
    logits_softcap: Value = None
    hidden_size: Value = Attr("hidden_size")
    num_layers: Value = Attr("num_hidden_layers")
    num_heads: Value = Attr("num_attention_heads")
    num_kv_heads: Value = Attr("num_key_value_heads")
    head_dim: Value = Attr("head_dim", default=None)
    intermediate_size: Value = Attr("intermediate_size")
    vocab_size: Value = Attr("vocab_size")
    tied_embeddings: Value = Attr("tie_word_embeddings", default=False)
    norm_eps: Value = Attr("rms_norm_eps")
    rope_theta: Value = Item("rope_parameters", "rope_theta")
    rotary_fraction: Value = Item("rope_parameters", "partial_rotary_factor", default=1.0)

    def resolve(self, config, entry: str = "a family") -> Arch:
        """The numbers and blocks the IR is built from, for ``config``; ``entry`` (the model id)
        names the registry entry in an error."""

        def read(name: str):
            where = f"{entry}: ArchSpec.{name}"
            found = value(getattr(self, name), config, where)
            if name == "head_dim" and found is None:
                found = read("hidden_size") // read("num_heads")
            what, ok = _CHECKS[name]
            if not ok(found):
                raise ShardingIRError(f"{where} is {found!r}: it must be {what}.")
            return found

        heads, kv_heads, head_dim = read("num_heads"), read("num_kv_heads"), read("head_dim")
        if heads % kv_heads:
            raise ShardingIRError(f"{entry}: {heads} heads are no multiple of {kv_heads} KV heads.")
        rotary_dim = int(head_dim * read("rotary_fraction"))
        if rotary_dim % 2:
            raise ShardingIRError(f"{entry}: the rotary dims ({rotary_dim}) must be even.")

        def number(name: str) -> float:
            return float(value(getattr(self, name), config, f"{entry}: ArchSpec.{name}"))

        cap = value(self.logits_softcap, config, f"{entry}: ArchSpec.logits_softcap")
        return Arch(
            hidden_size=read("hidden_size"),
            num_layers=read("num_layers"),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=read("intermediate_size"),
            vocab_size=read("vocab_size"),
            tied_embeddings=read("tied_embeddings"),
            norm_eps=float(read("norm_eps")),
            rope_theta=float(read("rope_theta")),
            rotary_dim=rotary_dim,
            activation=str(value(self.activation, config, f"{entry}: ArchSpec.activation")),
            layer=self.layer.resolve(config, f"{entry}: layer"),
            attention=self.attention.resolve(config, f"{entry}: attention"),
            mlp=self.mlp.resolve(config, f"{entry}: mlp"),
            moe=self.moe.resolve(config, f"{entry}: moe") if self.moe else None,
            norm=self.norm.resolve(config, f"{entry}: norm"),
            final_norm=self.final_norm,
            lm_head_bias=read("lm_head_bias"),
            embedding_multiplier=number("embedding_multiplier"),
            residual_multiplier=number("residual_multiplier"),
            logits_multiplier=number("logits_multiplier"),
            logits_softcap=None if cap is None else float(cap),
        )


@dataclass(frozen=True)
class Arch:
    """A spec resolved for one config: the sizes every decoder has, the blocks, the names."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    norm_eps: float
    rope_theta: float
    rotary_dim: int  # the leading dims of each head RoPE rotates (head_dim x rotary fraction)
    activation: str
    layer: BlockUse
    attention: BlockUse
    mlp: BlockUse
    moe: BlockUse | None
    norm: BlockUse
    final_norm: str
    lm_head_bias: bool
    embedding_multiplier: float
    residual_multiplier: float
    logits_multiplier: float
    logits_softcap: float | None
    fixed_routing: bool = False  # MoE blocks pick experts by token index (see decoder)
