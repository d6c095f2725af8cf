"""Each family's IR against HF's own class on the same config and weights (fp32, HF's router),
for the default tiny config and every variant: the check each equivalence case runs first
(``hf_reference.matches_hf_check``), here without spawning, plus what it must catch."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from stagebot.harness.suites.sharding_ir.build import build_ir_model, prefill_inputs
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
from stagebot.harness.suites.sharding_ir.family import Attr, Block
from stagebot.harness.suites.sharding_ir.hf_reference import build_hf_model, matches_hf_check
from stagebot.harness.suites.sharding_ir.registry import REGISTRY

CASES = [
    pytest.param(model_id, name, overrides, id=f"{model_id}:{name}")
    for model_id, spec in REGISTRY.items()
    for name, overrides in spec.cases(DistConfig.named("tep"))
]
LLAMA, QWEN3, QWEN2_MOE = "meta-llama/Llama-3.1-8B", "Qwen/Qwen3-8B", "Qwen/Qwen1.5-MoE-A2.7B"
GRANITE_MOE = "ibm-granite/granite-3.1-3b-a800m-instruct"
OLMO2, GEMMA2 = "allenai/OLMo-2-1124-7B", "google/gemma-2-2b"
GRANITE_SWA = "ibm-granite/granite-swash-2b"
PHI2, STARCODER2 = "microsoft/phi-2", "bigcode/starcoder2-3b"


def _with(model_id: str, blocks: dict | None = None, **arch):
    """The registered entry of ``model_id`` with some of its spec's fields, or of its blocks'
    parameters (``{"moe": {"router": "gate"}}``), replaced."""
    spec = REGISTRY[model_id]
    for field, params in (blocks or {}).items():
        arch[field] = getattr(spec.arch, field).but(**params)
    return dataclasses.replace(spec, arch=dataclasses.replace(spec.arch, **arch))


@pytest.mark.parametrize(("model_id", "variant", "overrides"), CASES)
def test_ir_matches_hf(model_id, variant, overrides):
    result = matches_hf_check(REGISTRY[model_id], overrides)
    assert result.ok, result.detail


def test_every_family_has_its_variants():
    for spec in REGISTRY.values():
        names = {name for name, _ in spec.cases(DistConfig.named("tep"))}
        assert "kv-heads-below-tp" in names, spec.model_id
        assert ("experts-not-divisible-by-ep" in names) == (spec.arch.moe is not None)


def test_llama_with_the_qwen3_ir_fails():
    wrong = dataclasses.replace(REGISTRY[LLAMA], arch=REGISTRY[QWEN3].arch)
    result = matches_hf_check(wrong, {})
    assert not result.ok and "q_norm" in result.detail, result.detail


def test_the_check_against_hf_runs_once_per_spec_and_overrides():
    """The unit tests and each dist config's case share one result; another spec gets its own."""
    spec = REGISTRY[LLAMA]
    assert matches_hf_check(spec, {}) is matches_hf_check(spec, {})
    assert matches_hf_check(spec, {"num_key_value_heads": 1}) is not matches_hf_check(spec, {})
    wrong = dataclasses.replace(spec, arch=REGISTRY[QWEN3].arch)
    assert not matches_hf_check(wrong, {}).ok


def test_a_wrong_router_normalisation_fails():
    """Same parameter names, other numbers: only the comparison of logits can see it."""
    assert REGISTRY[QWEN2_MOE].config().norm_topk_prob is False  # HF's default, the tiny one's
    result = matches_hf_check(_with(QWEN2_MOE, {"moe": {"norm_topk_prob": True}}), {})
    assert not result.ok and "max |IR - HF|" in result.detail, result.detail


def test_a_changed_weight_is_seen():
    spec = REGISTRY[QWEN3]
    ir = build_ir_model(spec)
    hf = build_hf_model(spec, ir)
    with torch.no_grad():
        hf.get_parameter("model.layers.1.mlp.down_proj.weight").mul_(1.01)
    ids, pos = prefill_inputs(ir.config.vocab_size, batch=1, seq=16)
    with torch.no_grad(), pytest.raises(AssertionError):
        torch.testing.assert_close(
            ir(ids, pos),
            hf(input_ids=ids, position_ids=pos, use_cache=False).logits,
            rtol=1e-5,
            atol=1e-5,
        )


def test_a_wrong_rope_frequency_in_the_ir_is_seen():
    """HF's class computes its RoPE frequencies from the config; the IR's are not handed to it."""
    spec = REGISTRY[LLAMA]
    ir = build_ir_model(spec)
    with torch.no_grad():
        ir.model.rotary_emb.inv_freq.mul_(1.01)
    hf = build_hf_model(spec, ir)
    ids, pos = prefill_inputs(ir.config.vocab_size, batch=1, seq=16)
    with torch.no_grad():
        diff = (ir(ids, pos) - hf(input_ids=ids, position_ids=pos, use_cache=False).logits).abs()
    assert diff.max() > 1e-4, diff.max()


@pytest.mark.parametrize(
    "wrong",
    [
        {"embedding_multiplier": 1.0},
        {"blocks": {"attention": {"scale": None}}},  # the default, head_dim ** -0.5
        {"residual_multiplier": 1.0},
        {"logits_multiplier": 1.0},
        {"activation": "gelu"},
    ],
    ids=[
        "embedding_multiplier",
        "attention_scale",
        "residual_multiplier",
        "logits_multiplier",
        "activation",
    ],
)
def test_a_wrong_declared_value_fails(wrong):
    """Each value GraniteMoE's entry declares is load-bearing: left at the decoder's default (or
    another activation), the IR has HF's parameter names and other numbers."""
    result = matches_hf_check(_with(GRANITE_MOE, **wrong), {})
    assert not result.ok and "max |IR - HF|" in result.detail, result.detail


@pytest.mark.parametrize(
    ("moe", "declared"),
    [({"router": "gate"}, "block_sparse_moe.gate"), ({"module": "mlp"}, "mlp.router")],
    ids=["router", "module"],
)
def test_a_wrong_moe_module_name_fails_naming_the_expected_one(moe, declared):
    """The check names the parameter HF expects and the one the wrong entry built instead."""
    result = matches_hf_check(_with(GRANITE_MOE, {"moe": moe}), {})
    assert not result.ok, result.detail
    expected = "missing from the IR (e.g. ['model.layers.0.block_sparse_moe.router.weight'"
    assert expected in result.detail, result.detail
    assert f"unknown to HF (e.g. ['model.layers.0.{declared}.weight'" in result.detail


def test_an_unknown_activation_is_named_with_the_known_ones():
    with pytest.raises(ShardingIRError, match=r"unknown activation 'swiglu'.*one of silu, gelu"):
        build_ir_model(_with(GRANITE_MOE, activation="swiglu"))


@pytest.mark.parametrize(
    ("wrong", "detail"),
    [
        ({"layer": Block("sequential")}, "unknown to HF (e.g. ['model.layers.0.input_layernorm"),
        (
            {"layer": Block("sequential", norms="sandwich")},
            "unknown to HF (e.g. ['model.layers.0.input_layernorm.weight'",
        ),
        (
            {"blocks": {"attention": {"qk_norm": "head"}}},
            "size mismatch for model.layers.0.self_attn",
        ),
    ],
    ids=["norms-pre", "norms-sandwich", "qk_norm-head"],
)
def test_olmo2_with_a_wrong_norm_placement_or_qk_norm_fails(wrong, detail):
    """OLMo2 normalises after each branch (``post``) and q/k over the whole projection."""
    result = matches_hf_check(_with(OLMO2, **wrong), {})
    assert not result.ok and detail in result.detail, result.detail


def test_olmo2_declares_its_followers_and_exports_them():
    """The sharded case checks follower rows where the graph has ``shard_like`` hints: OLMo2's
    q/k norm weights, one pair per layer, each declared by its attention block."""
    from stagebot.harness.suites.sharding_ir.checks import hint_count

    model = build_ir_model(REGISTRY[OLMO2])
    followers = model.expected_followers()
    assert followers["model.layers.1.self_attn.k_norm.weight"] == (
        "model.layers.1.self_attn.k_proj.weight"
    )
    ids, pos = prefill_inputs(model.arch.vocab_size, batch=1, seq=8)
    gm = torch.export.export(model, (ids, pos)).module()
    assert hint_count(gm, "shard_like") == len(followers) == 2 * model.arch.num_layers


@pytest.mark.parametrize(
    ("wrong", "detail"),
    [
        (
            {"layer": Block("sequential")},
            "missing from the IR (e.g. ['model.layers.0.pre_feedforward_layernorm",
        ),
        ({"norm": Block("rms_norm")}, "max |IR - HF|"),  # offset 0: weight, not 1 + weight
        ({"embedding_multiplier": 1.0}, "max |IR - HF|"),
        ({"logits_softcap": None}, "max |IR - HF|"),
        ({"blocks": {"attention": {"scale": None}}}, "max |IR - HF|"),
        ({"blocks": {"attention": {"softcap": None}}}, "max |IR - HF|"),
        ({"blocks": {"attention": {"sliding_window": None}}}, "max |IR - HF|"),
        ({"attention": Block("attention", scale=Attr("query_pre_attn_scalar") ** -0.5)}, "max |"),
    ],
    ids=[
        "norms",
        "norm-offset",
        "embedding_multiplier",
        "logits_softcap",
        "attention-scale",
        "attention-softcap",
        "sliding_window",
        "sdpa-attention",
    ],
)
def test_gemma2_with_a_wrong_norm_placement_multiplier_or_attention_fails(wrong, detail):
    """Each thing Gemma-2's entry declares is load-bearing at the tiny sizes."""
    result = matches_hf_check(_with(GEMMA2, **wrong), {})
    assert not result.ok and detail in result.detail, result.detail


def test_an_unknown_norm_placement_is_named_with_the_known_ones():
    with pytest.raises(
        ShardingIRError, match=r"unknown norm placement 'postnorm'.*one of pre, post, sandwich"
    ):
        build_ir_model(_with(GEMMA2, {"layer": {"norms": "postnorm"}}))


@pytest.mark.parametrize(
    ("wrong", "detail"),
    [
        ({"blocks": {"attention": {"layer_rope_theta": None}}}, "max |IR - HF|"),  # RoPE on all
        ({"blocks": {"attention": {"sliding_window": None}}}, "max |IR - HF|"),
        ({"blocks": {"attention": {"scale": None}}}, "max |IR - HF|"),
        (
            {"attention": Block("softcap_attention", scale=Attr("attention_multiplier"))},
            "missing from the IR (e.g. ['model.layers.0.self_attn.sinks'",
        ),
    ],
    ids=["nope-layer", "sliding_window", "attention-scale", "no-sinks-block"],
)
def test_granite_swa_with_a_wrong_attention_fails(wrong, detail):
    """Each thing GraniteSWA's attention entry declares is load-bearing at the tiny sizes."""
    result = matches_hf_check(_with(GRANITE_SWA, **wrong), {})
    assert not result.ok and detail in result.detail, result.detail


def test_sinks_ignored_fail_against_hf(monkeypatch):
    """The sink logits are load-bearing: the same block computing its softmax without them (the
    soft-capping op's) has HF's parameters and other numbers."""
    from stagebot.harness.suites.sharding_ir.blocks.sink_attention import SinkAttention
    from stagebot.harness.suites.sharding_ir.blocks.softcap_attention import SoftcapAttention
    from stagebot.harness.suites.sharding_ir.hf_reference import TOLERANCE, ir_and_hf_logits

    monkeypatch.setattr(SinkAttention, "core", SoftcapAttention.core)
    ir, hf = ir_and_hf_logits(REGISTRY[GRANITE_SWA], {})
    assert (ir - hf).abs().max() > 100 * TOLERANCE


def test_a_layer_with_another_rope_base_is_refused():
    spec = REGISTRY[GRANITE_SWA]
    with pytest.raises(ShardingIRError, match=r"layer 1 has RoPE base 500.0, the decoder computes"):
        build_ir_model(spec, {"layer_rope_theta": [10000.0, 500.0]})


def test_sinks_follow_the_query_heads_and_are_exported():
    """Each layer's sinks follow its q_proj (an entry per head): one ``shard_like`` hint each."""
    from stagebot.harness.suites.sharding_ir.checks import hint_count

    model = build_ir_model(REGISTRY[GRANITE_SWA])
    followers = model.expected_followers()
    assert followers == {
        f"model.layers.{i}.self_attn.sinks": f"model.layers.{i}.self_attn.q_proj.weight"
        for i in range(model.arch.num_layers)
    }
    ids, pos = prefill_inputs(model.arch.vocab_size, batch=1, seq=8)
    gm = torch.export.export(model, (ids, pos)).module()
    assert hint_count(gm, "shard_like") == len(followers)


def test_sinks_on_other_heads_show_beyond_the_bf16_tolerance():
    """NCCL runs the checks in bf16: the sinks (drawn as their block's ``init`` says) and the tiny
    multipliers leave a sink on the wrong head visible there (every layer's sinks of heads 0-1
    replaced by those of heads 2-3, as rank 0 of 2 holding rank 1's; at the default 0.1 N: rel
    RMSE 0.004)."""
    from stagebot.harness.suites.sharding_ir.checks import REL_RMSE_TOLERANCE, rel_rmse

    model = build_ir_model(REGISTRY[GRANITE_SWA]).to(torch.bfloat16)
    ids, pos = prefill_inputs(model.arch.vocab_size)
    with torch.no_grad():
        reference = model(ids, pos)
        for layer in model.model.layers:
            sinks = layer.self_attn.sinks
            sinks.copy_(torch.cat((sinks[2:], sinks[2:])))
        shifted = model(ids, pos)
    assert rel_rmse(shifted, reference) > 2 * REL_RMSE_TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize(
    ("model_id", "wrong", "detail"),
    [
        # GPT-NeoX's composition: Starcoder2's two norms, both on the layer's input, in parallel
        (STARCODER2, {"layer": Block("parallel", shared_norm=False)}, "max |IR - HF|"),
        (STARCODER2, {"layer": Block("parallel", shared_norm=False, fused_reduce=False)}, "max |"),
        (
            PHI2,
            {"layer": Block("sequential")},
            "unknown to HF (e.g. ['model.layers.0.post_attention",
        ),
        (PHI2, {"layer": Block("parallel", shared_norm=False)}, "unknown to HF (e.g. ['model.lay"),
    ],
    ids=["starcoder2-parallel", "starcoder2-parallel-unfused", "phi2-sequential", "phi2-two-norms"],
)
def test_a_wrong_layer_composition_fails(model_id, wrong, detail):
    """The layer block is load-bearing: Starcoder2 composed in parallel has its parameters and
    other numbers; Phi-2 composed sequentially has a norm HF's class lacks."""
    result = matches_hf_check(_with(model_id, **wrong), {})
    assert not result.ok and detail in result.detail, result.detail


@pytest.mark.parametrize(
    ("model_id", "wrong", "detail"),
    [
        (PHI2, {"rotary_fraction": 1.0}, "max |IR - HF|"),  # RoPE on all of each head
        (PHI2, {"norm_eps": 0.1}, "max |IR - HF|"),
        (PHI2, {"lm_head_bias": False}, "missing from the IR (e.g. ['lm_head.bias']"),
        (PHI2, {"final_norm": "norm"}, "missing from the IR (e.g. ['model.final_layernorm.weight'"),
        (PHI2, {"blocks": {"attention": {"o_name": "o_proj"}}}, "missing from the IR (e.g. ['mo"),
        (PHI2, {"activation": "gelu"}, "max |IR - HF|"),
        (STARCODER2, {"blocks": {"attention": {"o_bias": False}}}, "self_attn.o_proj.bias'"),
        (STARCODER2, {"norm": Block("layer_norm", bias=False)}, "input_layernorm.bias'"),
        (STARCODER2, {"norm": Block("rms_norm")}, "input_layernorm.bias'"),
    ],
    ids=[
        "phi2-rotary-fraction",
        "phi2-epsilon",
        "phi2-lm-head-bias",
        "phi2-final-norm",
        "phi2-o-name",
        "phi2-activation",
        "starcoder2-o-bias",
        "starcoder2-norm-bias",
        "starcoder2-rms-norm",
    ],
)
def test_a_wrong_declared_value_of_phi2_or_starcoder2_fails(model_id, wrong, detail):
    """Each thing Phi-2's and Starcoder2's entries declare is load-bearing at the tiny sizes."""
    result = matches_hf_check(_with(model_id, **wrong), {})
    assert not result.ok and detail in result.detail, result.detail
