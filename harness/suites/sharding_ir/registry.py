"""Model registry: HF model id -> config class, HF class, the family's spec, tiny settings.

Adding a model family is adding an entry (see README.md): the spec (``family.ArchSpec``) names
the blocks the decoder composes, with their parameters under the config's names; a family that
needs a block the suite lacks adds a module to ``blocks/``. The variants follow from the spec.
Kept light (no torch): the HF classes and the blocks are named, resolved on use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError, did_you_mean
from stagebot.harness.suites.sharding_ir.family import ArchSpec, Attr, Block

DEFAULT = "default"  # the variant name of the tiny settings as they are
# A 2-layer decoder (the Qwen MoE families keep layer 0 dense: a dense and a sparse layer; every
# export, forward and control costs in proportion to the layers): hidden 64, 4 heads of 16,
# vocab 64, 256 positions.
TINY = MappingProxyType(
    {
        "num_hidden_layers": 2,
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


@dataclass(frozen=True)
class ModelSpec:
    model_id: str
    config_class: str  # a transformers attribute
    hf_class: str  # a transformers attribute, the reference the IR is checked against
    arch: ArchSpec
    tiny: Mapping  # settings over the config class's defaults

    def config(self, **overrides):
        """The config class with the tiny settings (and ``overrides``) over its defaults."""
        import transformers

        return getattr(transformers, self.config_class)(**(dict(self.tiny) | overrides))

    def hf_model_class(self) -> type:
        import transformers

        return getattr(transformers, self.hf_class)

    def splits_experts(self, dc: DistConfig) -> bool:
        """Whether ``dc`` spreads this family's routed experts over EP ranks."""
        return self.arch.moe is not None and dc.moe_ep >= 2

    def cases(self, dc: DistConfig) -> list[tuple[str, dict]]:
        """(variant name, config overrides) to check on ``dc``: the default tiny config, then each
        variant that exercises something there."""
        applied = ((name, variant(dc)) for name, variant in self.variants().items())
        return [(DEFAULT, {})] + [(name, o) for name, o in applied if o is not None]

    def variants(self) -> dict[str, Callable[[DistConfig], dict | None]]:
        """Variant name -> DistConfig -> config overrides, or None where it exercises nothing."""
        out = {}
        kv_heads = self.arch.num_kv_heads
        # fused q/k/v: no KV head replication; KV heads not a config value: nothing to vary
        if not self.arch.attention.param("fused_qkv") and isinstance(kv_heads, Attr):
            out["kv-heads-below-tp"] = _KVHeadsBelowTP(kv_heads)
        if self.arch.moe is not None:
            experts = self.arch.moe.param("num_experts")
            out["experts-not-divisible-by-ep"] = _ExpertsNotDivisibleByEP(experts)
        return out


@dataclass(frozen=True)
class _KVHeadsBelowTP:
    """KV heads = TP/2 (4 query heads): ranks share replicated KV heads in pairs."""

    num_kv_heads: Attr

    def __call__(self, dc: DistConfig) -> dict | None:
        return {self.num_kv_heads.name: dc.tp_size // 2} if dc.tp_size >= 2 else None


@dataclass(frozen=True)
class _ExpertsNotDivisibleByEP:
    """2*EP+1 experts: the last EP rank takes the remainder."""

    num_experts: Attr

    def __call__(self, dc: DistConfig) -> dict | None:
        return {self.num_experts.name: 2 * dc.moe_ep + 1} if dc.moe_ep >= 2 else None


_QWEN_MOE = Block(
    "sparse_moe",
    num_experts=Attr("num_experts"),
    top_k=Attr("num_experts_per_tok"),
    intermediate_size=Attr("moe_intermediate_size"),
    norm_topk_prob=Attr("norm_topk_prob"),
    dense_layers=Attr("mlp_only_layers"),
    sparse_step=Attr("decoder_sparse_step"),
)
_MOE_TINY = {"num_experts_per_tok": 2, "moe_intermediate_size": 32, "mlp_only_layers": [0]}

_MIXTRAL_MOE = Block(
    "sparse_moe",
    num_experts=Attr("num_local_experts"),
    top_k=Attr("num_experts_per_tok"),
    intermediate_size=Attr("intermediate_size"),
    norm_topk_prob=True,
)
_MIXTRAL_TINY = {**TINY, "num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 32}
_BIAS = dict(bias=Attr("attention_bias"), o_bias=Attr("attention_bias"))

# The multipliers of granite-3.1-3b-a800m (the config class defaults every one to 1.0 but the
# attention scale, which a wrong entry could then not be told from).
_GRANITE_MULTIPLIERS = {
    "embedding_multiplier": 12.0,
    "attention_multiplier": 0.015625,
    "residual_multiplier": 0.22,
    "logits_scaling": 6.0,
}

FAMILIES = (
    ModelSpec(
        model_id="Qwen/Qwen3-8B",
        config_class="Qwen3Config",
        hf_class="Qwen3ForCausalLM",
        arch=ArchSpec(attention=Block("attention", qk_norm="head", **_BIAS)),
        tiny={**TINY, "attention_bias": True},
    ),
    ModelSpec(
        model_id="Qwen/Qwen3-30B-A3B",
        config_class="Qwen3MoeConfig",
        hf_class="Qwen3MoeForCausalLM",
        arch=ArchSpec(attention=Block("attention", qk_norm="head", **_BIAS), moe=_QWEN_MOE),
        tiny={**TINY, **_MOE_TINY, "num_experts": 8, "norm_topk_prob": True},
    ),
    ModelSpec(
        model_id="meta-llama/Llama-3.1-8B",
        config_class="LlamaConfig",
        hf_class="LlamaForCausalLM",
        arch=ArchSpec(
            attention=Block("attention", **_BIAS),
            mlp=Block("gated_mlp", bias=Attr("mlp_bias")),
        ),
        tiny={**TINY, "mlp_bias": True},
    ),
    ModelSpec(
        model_id="mistralai/Mixtral-8x7B-v0.1",
        config_class="MixtralConfig",
        hf_class="MixtralForCausalLM",
        arch=ArchSpec(moe=_MIXTRAL_MOE),
        tiny=_MIXTRAL_TINY,
    ),
    ModelSpec(
        model_id="Qwen/Qwen1.5-MoE-A2.7B",
        config_class="Qwen2MoeConfig",
        hf_class="Qwen2MoeForCausalLM",
        arch=ArchSpec(
            attention=Block("attention", bias=Attr("qkv_bias")),
            moe=_QWEN_MOE.but(shared_intermediate_size=Attr("shared_expert_intermediate_size")),
        ),
        tiny={**TINY, **_MOE_TINY, "num_experts": 8, "shared_expert_intermediate_size": 48},
    ),
    ModelSpec(
        model_id="ibm-granite/granite-3.1-3b-a800m-instruct",
        config_class="GraniteMoeConfig",
        hf_class="GraniteMoeForCausalLM",
        arch=ArchSpec(
            attention=Block("attention", scale=Attr("attention_multiplier")),
            # softmax over the top-k logits: the same routing as Mixtral's, its own names
            moe=_MIXTRAL_MOE.but(module="block_sparse_moe", router="router"),
            activation=Attr("hidden_act"),
            embedding_multiplier=Attr("embedding_multiplier"),
            residual_multiplier=Attr("residual_multiplier"),
            logits_multiplier=1 / Attr("logits_scaling"),
        ),
        tiny=_MIXTRAL_TINY | _GRANITE_MULTIPLIERS,
    ),
    ModelSpec(
        model_id="allenai/OLMo-2-1124-7B",
        config_class="Olmo2Config",
        hf_class="Olmo2ForCausalLM",
        arch=ArchSpec(
            layer=Block("sequential", norms="post"),
            attention=Block("attention", qk_norm="projection", **_BIAS),
        ),
        tiny={**TINY, "eos_token_id": None},
    ),
    ModelSpec(
        model_id="google/gemma-2-2b",
        config_class="Gemma2Config",
        hf_class="Gemma2ForCausalLM",
        arch=ArchSpec(
            attention=Block(
                "softcap_attention",
                scale=Attr("query_pre_attn_scalar") ** -0.5,
                softcap=Attr("attn_logit_softcapping"),
                sliding_window=Attr("sliding_window"),
                layer_types=Attr("layer_types"),
            ),
            layer=Block("sequential", norms="sandwich"),
            norm=Block("rms_norm", offset=1.0),  # Gemma's norms scale by 1 + weight
            activation=Attr("hidden_activation"),
            embedding_multiplier=Attr("hidden_size") ** 0.5,
            logits_softcap=Attr("final_logit_softcapping"),
        ),
        # caps and window small enough to matter at the tiny sizes; the scalar is not head_dim
        tiny=TINY
        | {"attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0}
        | {"sliding_window": 16, "query_pre_attn_scalar": 32},
    ),
    ModelSpec(
        model_id="ibm-granite/granite-swash-2b",
        config_class="GraniteSWAConfig",
        hf_class="GraniteSWAForCausalLM",
        arch=ArchSpec(
            attention=Block(
                "sink_attention",
                scale=Attr("attention_multiplier"),
                sliding_window=Attr("sliding_window"),
                layer_types=Attr("layer_types"),
                layer_rope_theta=Attr("layer_rope_theta"),
                **_BIAS,
            ),
            mlp=Block("gated_mlp", bias=Attr("mlp_bias")),
            activation=Attr("hidden_act"),
            embedding_multiplier=Attr("embedding_multiplier"),
            residual_multiplier=Attr("residual_multiplier"),
            logits_multiplier=1 / Attr("logits_scaling"),
        ),
        # layer 1 slides over 16 positions without RoPE (base 0); token ids within the vocabulary;
        # multipliers that leave the attention branch visible in bf16 (sinks on the wrong heads)
        tiny=TINY
        | {"sliding_window": 16, "layer_rope_theta": [10000.0, 0]}
        | {"bos_token_id": None, "eos_token_id": None}
        | {"embedding_multiplier": 4.0, "residual_multiplier": 0.5, "logits_scaling": 6.0}
        | {"attention_multiplier": 0.015625},
    ),
    ModelSpec(
        model_id="microsoft/phi-2",
        config_class="PhiConfig",
        hf_class="PhiForCausalLM",
        arch=ArchSpec(
            layer=Block("parallel"),  # attention and MLP off one LayerNorm, one all-reduce
            attention=Block("attention", bias=True, o_bias=True, o_name="dense"),
            mlp=Block("mlp", bias=True, up="fc1", down="fc2"),
            norm=Block("layer_norm"),
            final_norm="final_layernorm",
            lm_head_bias=True,
            activation=Attr("hidden_act"),
            norm_eps=Attr("layer_norm_eps"),
        ),
        # RoPE on half of each head (the config class's partial_rotary_factor, 0.5)
        tiny={**TINY, "bos_token_id": None, "eos_token_id": None},
    ),
    ModelSpec(
        model_id="bigcode/starcoder2-3b",
        config_class="Starcoder2Config",
        hf_class="Starcoder2ForCausalLM",
        arch=ArchSpec(
            attention=Block("attention", bias=Attr("use_bias"), o_bias=Attr("use_bias")),
            mlp=Block("mlp", bias=Attr("use_bias"), up="c_fc", down="c_proj"),
            norm=Block("layer_norm"),
            activation=Attr("hidden_act"),
            norm_eps=Attr("norm_epsilon"),
        ),
        tiny={**TINY, "bos_token_id": None, "eos_token_id": None},
    ),
)


class Registry(dict[str, ModelSpec]):
    """Model id -> spec. ``REGISTRY`` is the suite's; a test may build its own."""

    def add(self, spec: ModelSpec) -> ModelSpec:
        if spec.model_id in self:
            raise ShardingIRError(f"model id {spec.model_id!r} is registered already.")
        self[spec.model_id] = spec
        return spec

    def lookup(self, model_id: str) -> ModelSpec:
        if model_id not in self:
            raise ShardingIRError(
                f"unknown sharding-IR model id {model_id!r}; registered: {', '.join(self)} "
                "(or 'all')." + did_you_mean(model_id, list(self))
            )
        return self[model_id]

    def resolve_model_ids(self, requested: list[str]) -> list[str]:
        """The ids to check, in order, without repeats: ``all`` expands to every registered id."""
        ids: list[str] = []
        for model_id in requested:
            for resolved in self if model_id == "all" else [self.lookup(model_id).model_id]:
                if resolved not in ids:
                    ids.append(resolved)
        return ids


REGISTRY = Registry()
for _spec in FAMILIES:
    REGISTRY.add(_spec)
