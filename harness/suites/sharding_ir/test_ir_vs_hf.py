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
from stagebot.harness.suites.sharding_ir.hf_reference import build_hf_model, matches_hf_check
from stagebot.harness.suites.sharding_ir.registry import REGISTRY

CASES = [
    pytest.param(model_id, name, overrides, id=f"{model_id}:{name}")
    for model_id, spec in REGISTRY.items()
    for name, overrides in spec.cases(DistConfig.named("tep"))
]
LLAMA, QWEN3, QWEN2_MOE = "meta-llama/Llama-3.1-8B", "Qwen/Qwen3-8B", "Qwen/Qwen1.5-MoE-A2.7B"
GRANITE_MOE = "ibm-granite/granite-3.1-3b-a800m-instruct"


def _with(model_id: str, moe: dict | None = None, **arch):
    """The registered entry of ``model_id`` with some of its spec's fields (its MoE's) replaced."""
    spec = REGISTRY[model_id]
    if moe:
        arch["moe"] = dataclasses.replace(spec.arch.moe, **moe)
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
    spec = REGISTRY[QWEN2_MOE]
    assert spec.config().norm_topk_prob is False  # HF's default for Qwen2-MoE, the tiny one too
    moe = dataclasses.replace(spec.arch.moe, norm_topk_prob=True)
    wrong = dataclasses.replace(spec, arch=dataclasses.replace(spec.arch, moe=moe))
    result = matches_hf_check(wrong, {})
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


@pytest.mark.parametrize(
    "wrong",
    [
        {"embedding_multiplier": 1.0},
        {"attention_scale": None},  # the default, head_dim ** -0.5
        {"residual_multiplier": 1.0},
        {"logits_multiplier": 1.0},
        {"activation": "gelu"},
    ],
    ids=lambda wrong: next(iter(wrong)),
)
def test_a_wrong_declared_value_fails(wrong):
    """Each value GraniteMoE's entry declares is load-bearing: left at the decoder's default (or
    another activation), the IR has HF's parameter names and other numbers."""
    result = matches_hf_check(_with(GRANITE_MOE, **wrong), {})
    assert not result.ok and "max |IR - HF|" in result.detail, result.detail


@pytest.mark.parametrize(
    ("moe", "declared"),
    [({"router": "gate"}, "block_sparse_moe.gate"), ({"block": "mlp"}, "mlp.router")],
    ids=["router", "block"],
)
def test_a_wrong_moe_module_name_fails_naming_the_expected_one(moe, declared):
    """The check names the parameter HF expects and the one the wrong entry built instead."""
    result = matches_hf_check(_with(GRANITE_MOE, moe=moe), {})
    assert not result.ok, result.detail
    expected = "missing from the IR (e.g. ['model.layers.0.block_sparse_moe.router.weight'"
    assert expected in result.detail, result.detail
    assert f"unknown to HF (e.g. ['model.layers.0.{declared}.weight'" in result.detail


def test_an_unknown_activation_is_named_with_the_known_ones():
    with pytest.raises(ShardingIRError, match=r"unknown activation 'swiglu'.*one of silu, gelu"):
        build_ir_model(_with(GRANITE_MOE, activation="swiglu"))
