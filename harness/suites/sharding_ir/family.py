"""What a model family's decoder has, as data: the spec a registry entry carries, and the plain
numbers and flags (``Arch``) it resolves to for one HF config, from which the IR blocks are built.

A feature is either fixed for the family (a bool, a number) or held by the HF config under a name
of the family's choosing (``Attr("qkv_bias")``), or computed from such values
(``Attr("hidden_size") ** 0.5``): the spec maps those names, so neither the IR blocks nor
the suite's checks ever name a config key. The sizes every decoder has (``hidden_size``,
``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``intermediate_size``,
``rms_norm_eps``, ``vocab_size``, ``rope_parameters``, ``tie_word_embeddings``) are read under
HF's shared names, which each config class maps to its own through ``attribute_map``. Kept
light: no torch.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

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
        return self.op(*(_value(operand, config) for operand in self.operands))


Value = bool | float | str | Attr | Formula  # fixed for the family, or read or computed from config


def _value(feature: Value, config):
    return feature.read(config) if isinstance(feature, Attr | Formula) else feature


# Norm placement -> the layer's norms (module names as HF's classes call them) before and after
# attention, before and after the MLP; None where there is none.
NORM_PLACEMENTS = {
    "pre": ("input_layernorm", None, "post_attention_layernorm", None),
    "sandwich": (
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ),
}


@dataclass(frozen=True)
class MoESpec:
    """A sparse MoE block: softmax top-k router, routed gated-MLP experts (``experts.<e>``), and
    optionally one shared expert scaled by ``sigmoid(shared_expert_gate(x))`` (Qwen2-MoE).
    ``block`` and ``router`` are the family's module names: the layer's attribute holding the block
    (``mlp`` in ``model.layers.<i>.mlp``) and the router's within it (``gate``)."""

    num_experts: Attr
    top_k: Attr
    expert_intermediate_size: Attr
    norm_topk_prob: bool | Attr  # renormalise the top-k weights to sum to 1
    shared_expert_intermediate_size: Attr | None = None  # None: no shared expert
    dense_layers: Attr | None = None  # a list of layer indices that keep a dense MLP
    sparse_step: Attr | None = None  # only every n-th layer is sparse
    block: str = "mlp"
    router: str = "gate"


@dataclass(frozen=True)
class ArchSpec:
    """The decoder's features. ``fused_qkv`` / ``fused_gate_up``: the checkpoint keeps q/k/v
    (``qkv_proj``) or gate/up (``gate_up_proj``, gate rows first) in one weight. ``activation``:
    the gate's in every gated MLP (dense, routed and shared experts), a ``hints.ACTIVATIONS``
    name. The multipliers scale the embeddings, each residual branch (attention and MLP outputs
    before they are added) and the logits; ``attention_scale`` is the softmax scale (None:
    ``head_dim ** -0.5``); every RMS norm scales by ``norm_weight_offset + weight``. Each is a
    number or a value read or computed from the config. ``norms``: a ``NORM_PLACEMENTS`` name."""

    qk_norm: bool = False
    qkv_bias: bool | Attr = False
    o_bias: bool | Attr = False
    mlp_bias: bool | Attr = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    moe: MoESpec | None = None
    activation: str | Attr = "silu"
    embedding_multiplier: Value = 1.0
    attention_scale: Value | None = None
    residual_multiplier: Value = 1.0
    logits_multiplier: Value = 1.0
    norm_weight_offset: Value = 0.0
    norms: str = "pre"

    def resolve(self, config) -> Arch:
        """The numbers and flags the IR blocks are built from, for ``config``."""
        if self.norms not in NORM_PLACEMENTS:
            raise ShardingIRError(
                f"unknown norm placement {self.norms!r}: the family's spec names one of "
                f"{', '.join(NORM_PLACEMENTS)}."
            )
        head_dim = getattr(config, "head_dim", None)
        moe = None
        if self.moe is not None:
            m, num_experts = self.moe, self.moe.num_experts.read(config)
            dense = set(m.dense_layers.read(config) or []) if m.dense_layers else set()
            step = m.sparse_step.read(config) if m.sparse_step else 1
            sparse = [
                i
                for i in range(config.num_hidden_layers)
                if num_experts > 0 and i not in dense and (i + 1) % step == 0
            ]
            shared = m.shared_expert_intermediate_size
            moe = MoEArch(
                num_experts=num_experts,
                top_k=m.top_k.read(config),
                intermediate_size=m.expert_intermediate_size.read(config),
                norm_topk_prob=bool(_value(m.norm_topk_prob, config)),
                shared_intermediate_size=shared.read(config) if shared else None,
                sparse_layers=frozenset(sparse),
                block=m.block,
                router=m.router,
            )
        head_dim = head_dim or config.hidden_size // config.num_attention_heads
        scale = self.attention_scale
        return Arch(
            hidden_size=config.hidden_size,
            num_layers=config.num_hidden_layers,
            num_heads=config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            head_dim=head_dim,
            intermediate_size=config.intermediate_size,
            vocab_size=config.vocab_size,
            tied_embeddings=config.tie_word_embeddings,
            rms_norm_eps=config.rms_norm_eps,
            rope_theta=config.rope_parameters["rope_theta"],
            qk_norm=self.qk_norm,
            qkv_bias=bool(_value(self.qkv_bias, config)),
            o_bias=bool(_value(self.o_bias, config)),
            mlp_bias=bool(_value(self.mlp_bias, config)),
            fused_qkv=self.fused_qkv,
            fused_gate_up=self.fused_gate_up,
            moe=moe,
            activation=str(_value(self.activation, config)),
            embedding_multiplier=float(_value(self.embedding_multiplier, config)),
            attention_scale=head_dim**-0.5 if scale is None else float(_value(scale, config)),
            residual_multiplier=float(_value(self.residual_multiplier, config)),
            logits_multiplier=float(_value(self.logits_multiplier, config)),
            norm_weight_offset=float(_value(self.norm_weight_offset, config)),
            norms=NORM_PLACEMENTS[self.norms],
        )


@dataclass(frozen=True)
class MoEArch:
    num_experts: int
    top_k: int
    intermediate_size: int
    norm_topk_prob: bool
    shared_intermediate_size: int | None
    sparse_layers: frozenset[int]
    block: str
    router: str


@dataclass(frozen=True)
class Arch:
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
    qk_norm: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    fused_qkv: bool
    fused_gate_up: bool
    moe: MoEArch | None
    activation: str
    embedding_multiplier: float
    attention_scale: float
    residual_multiplier: float
    logits_multiplier: float
    norm_weight_offset: float
    norms: tuple[str | None, ...]
