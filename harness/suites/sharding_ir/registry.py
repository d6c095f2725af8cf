"""Model registry: HF model id -> config class, IR class, HF class, tiny settings, variants.

Adding a model family is adding an entry. Kept light (no torch): the classes are named, resolved
on use. A variant maps a DistConfig to extra overrides, or None where it exercises nothing there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType

from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError, did_you_mean

Variant = Callable[[DistConfig], dict | None]

# A 4-layer decoder: hidden 64, 4 heads of 16, vocab 64, 256 positions.
_TINY = MappingProxyType(
    {
        "num_hidden_layers": 4,
        "hidden_size": 64,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 16,
        "vocab_size": 64,
        "max_position_embeddings": 256,
        "tie_word_embeddings": False,
    }
)


def _kv_heads_below_tp(dc: DistConfig) -> dict | None:
    """KV heads = TP/2 (4 query heads): ranks share replicated KV heads in pairs."""
    return {"num_key_value_heads": dc.tp_size // 2} if dc.tp_size >= 2 else None


def _experts_not_divisible_by_ep(dc: DistConfig) -> dict | None:
    """2*EP+1 experts: the last EP rank takes the remainder."""
    return {"num_experts": 2 * dc.moe_ep + 1} if dc.moe_ep >= 2 else None


@dataclass(frozen=True)
class ModelSpec:
    model_id: str
    config_class: str  # a transformers attribute
    ir_class: str  # "module:Class"
    hf_class: str  # a transformers attribute, the reference the IR is checked against
    tiny: dict
    variants: dict[str, Variant] = field(default_factory=dict)

    def config(self, **overrides):
        """The config class with the tiny settings (and ``overrides``) over its defaults."""
        import transformers

        return getattr(transformers, self.config_class)(**(dict(self.tiny) | overrides))

    def ir_model_class(self) -> type:
        import importlib

        module, name = self.ir_class.split(":")
        return getattr(importlib.import_module(module), name)

    def hf_model_class(self) -> type:
        import transformers

        return getattr(transformers, self.hf_class)


_MODELS = "stagebot.harness.suites.sharding_ir.models"
REGISTRY: dict[str, ModelSpec] = {
    spec.model_id: spec
    for spec in (
        ModelSpec(
            model_id="Qwen/Qwen3-8B",
            config_class="Qwen3Config",
            ir_class=f"{_MODELS}.qwen3:Qwen3IRForCausalLM",
            hf_class="Qwen3ForCausalLM",
            tiny={**_TINY, "attention_bias": True},
            variants={"kv-heads-below-tp": _kv_heads_below_tp},
        ),
        ModelSpec(
            model_id="Qwen/Qwen3-30B-A3B",
            config_class="Qwen3MoeConfig",
            ir_class=f"{_MODELS}.qwen3_moe:Qwen3MoeIRForCausalLM",
            hf_class="Qwen3MoeForCausalLM",
            tiny={
                **_TINY,
                "num_experts": 8,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 32,
                "norm_topk_prob": True,
                "mlp_only_layers": [0],
            },
            variants={"experts-not-divisible-by-ep": _experts_not_divisible_by_ep},
        ),
    )
}


def lookup(model_id: str) -> ModelSpec:
    if model_id not in REGISTRY:
        raise ShardingIRError(
            f"unknown sharding-IR model id {model_id!r}; registered: {', '.join(REGISTRY)} "
            "(or 'all')." + did_you_mean(model_id, list(REGISTRY))
        )
    return REGISTRY[model_id]


def resolve_model_ids(requested: list[str]) -> list[str]:
    """The ids to check, in order, without repeats: ``all`` expands to every registered id."""
    ids: list[str] = []
    for model_id in requested:
        for resolved in REGISTRY if model_id == "all" else [lookup(model_id).model_id]:
            if resolved not in ids:
                ids.append(resolved)
    return ids
