"""What a model family's decoder has, as data: the spec a registry entry carries (``ArchSpec``:
which blocks, by name, with which parameters; the norms' placement; the decoder's multipliers),
and the plain numbers (``Arch``) it resolves to for one HF config, from which the IR is built.

A parameter is either fixed for the family (a bool, a number, a string) or held by the HF config
under a name of the family's choosing (``Attr("qkv_bias")``), or computed from such values
(``Attr("hidden_size") ** 0.5``): the spec maps those names, so neither the blocks nor the
suite's checks ever name a config key. The sizes every decoder has (``hidden_size``,
``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``intermediate_size``,
``rms_norm_eps``, ``vocab_size``, ``rope_parameters``, ``tie_word_embeddings``) are read under
HF's shared names, which each config class maps to its own through ``attribute_map``. Kept
light: no torch (the blocks themselves live in ``blocks/``, found by name when a model is built).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field

from stagebot.harness.suites.sharding_ir.errors import ShardingIRError

# HF's shared name for the KV-head count (the KV-heads-below-TP variant sets it).
NUM_KV_HEADS = "num_key_value_heads"


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
    """A value held by the HF config, under this attribute name in the family's config class."""

    name: str

    def read(self, config):
        if not hasattr(config, self.name):
            raise ShardingIRError(
                f"{type(config).__name__} has no attribute {self.name!r}: the family's spec maps "
                "a feature to it; name the attribute this config class uses, or fix the feature."
            )
        return getattr(config, self.name)


@dataclass(frozen=True)
class Formula(_Arithmetic):
    """``op(*operands)``, each operand a number, an ``Attr`` or another ``Formula``."""

    op: Callable
    operands: tuple

    def read(self, config):
        return self.op(*(value(operand, config) for operand in self.operands))


Value = bool | int | float | str | Attr | Formula | None  # fixed, or read or computed from config


def value(feature: Value, config):
    return feature.read(config) if isinstance(feature, Attr | Formula) else feature


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

    def resolve(self, config) -> BlockUse:
        return BlockUse(self.name, {k: value(v, config) for k, v in self.params})


@dataclass(frozen=True)
class BlockUse:
    """A block with its parameters read from one config: what its builder is called with."""

    name: str
    params: dict = field(hash=False)


# Norm placement -> the layer's norms (module names as HF's classes call them) before and after
# attention, before and after the feed-forward block; None where there is none.
NORM_PLACEMENTS = {
    "pre": ("input_layernorm", None, "post_attention_layernorm", None),
    "post": (None, "post_attention_layernorm", None, "post_feedforward_layernorm"),
    "sandwich": (
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ),
}


@dataclass(frozen=True)
class ArchSpec:
    """The decoder of a family: its blocks and how they are placed.

    ``attention`` (the layer's ``self_attn``), ``mlp`` (the dense feed-forward block, ``mlp``),
    ``moe`` (the sparse one where the family has it: its builder says which layers keep the
    dense ``mlp``; its ``module`` parameter names the layer's attribute) and ``norm`` (every norm,
    q/k norms too) name registered blocks. ``norms``: a ``NORM_PLACEMENTS`` name. ``activation``:
    the gate's in every gated MLP (dense, routed and shared experts). The multipliers scale the
    embeddings, each residual branch (attention and feed-forward outputs before they are added)
    and the logits, which ``logits_softcap`` (None: none) then caps as ``cap * tanh(x / cap)``.
    """

    attention: Block = Block("attention")
    mlp: Block = Block("gated_mlp")
    moe: Block | None = None
    norm: Block = Block("rms_norm")
    norms: str = "pre"
    activation: Value = "silu"
    embedding_multiplier: Value = 1.0
    residual_multiplier: Value = 1.0
    logits_multiplier: Value = 1.0
    logits_softcap: Value = None

    def resolve(self, config) -> Arch:
        """The numbers and blocks the IR is built from, for ``config``."""
        if self.norms not in NORM_PLACEMENTS:
            raise ShardingIRError(
                f"unknown norm placement {self.norms!r}: the family's spec names one of "
                f"{', '.join(NORM_PLACEMENTS)}."
            )
        head_dim = getattr(config, "head_dim", None)
        cap = value(self.logits_softcap, config)
        return Arch(
            hidden_size=config.hidden_size,
            num_layers=config.num_hidden_layers,
            num_heads=config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            head_dim=head_dim or config.hidden_size // config.num_attention_heads,
            intermediate_size=config.intermediate_size,
            vocab_size=config.vocab_size,
            tied_embeddings=config.tie_word_embeddings,
            rms_norm_eps=config.rms_norm_eps,
            rope_theta=config.rope_parameters["rope_theta"],
            activation=str(value(self.activation, config)),
            attention=self.attention.resolve(config),
            mlp=self.mlp.resolve(config),
            moe=self.moe.resolve(config) if self.moe else None,
            norm=self.norm.resolve(config),
            norms=NORM_PLACEMENTS[self.norms],
            embedding_multiplier=float(value(self.embedding_multiplier, config)),
            residual_multiplier=float(value(self.residual_multiplier, config)),
            logits_multiplier=float(value(self.logits_multiplier, config)),
            logits_softcap=None if cap is None else float(cap),
        )


@dataclass(frozen=True)
class Arch:
    """A spec resolved for one config: sizes every decoder has, the blocks, the placement."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    rms_norm_eps: float
    rope_theta: float
    activation: str
    attention: BlockUse
    mlp: BlockUse
    moe: BlockUse | None
    norm: BlockUse
    norms: tuple[str | None, ...]
    embedding_multiplier: float
    residual_multiplier: float
    logits_multiplier: float
    logits_softcap: float | None
    fixed_routing: bool = False  # MoE blocks pick experts by token index (see decoder)
