"""Adding a family is adding an entry: families the suite does not register go into a temporary
registry from their spec alone and run an equivalence case (Phi-3, whose checkpoints fuse q/k/v
and gate/up; Cohere, whose layer is parallel off one LayerNorm without bias under
``layer_norm_eps``, whose RoPE rotates adjacent pairs and whose logits are scaled); a family
registered with another family's spec, or with the wrong layer composition, fails."""

from __future__ import annotations

import dataclasses

import pytest

from stagebot.harness.suites.sharding_ir.case import MATCHES_HF, run_case
from stagebot.harness.suites.sharding_ir.family import ArchSpec, Attr, Block
from stagebot.harness.suites.sharding_ir.hf_reference import matches_hf_check
from stagebot.harness.suites.sharding_ir.registry import (
    DEFAULT,
    REGISTRY,
    TINY,
    ModelSpec,
    Registry,
)
from stagebot.harness.suites.sharding_ir.worker import CONTROLS

CONFIG = "tp-only"  # 2 ranks: the cheapest config that shards


def _failed(report: dict, key: str) -> list[str]:
    return [r.detail for r in report[key] if not r.ok]


PHI3 = ModelSpec(
    model_id="microsoft/Phi-3-mini-4k-instruct",
    config_class="Phi3Config",
    hf_class="Phi3ForCausalLM",
    arch=ArchSpec(attention=Block("attention", fused_qkv=True), mlp=Block("gated_mlp", fused=True)),
    tiny={**TINY, "pad_token_id": None, "eos_token_id": None},
)


# Cohere (Command R): every block it needs is registered, so the entry is all it takes.
COHERE = ModelSpec(
    model_id="CohereForAI/c4ai-command-r-v01",
    config_class="CohereConfig",
    hf_class="CohereForCausalLM",
    arch=ArchSpec(
        layer=Block("parallel"),  # attention and MLP off input_layernorm, one all-reduce
        attention=Block("interleaved_rope_attention"),
        norm=Block("layer_norm", bias=False),
        norm_eps=Attr("layer_norm_eps"),
        activation=Attr("hidden_act"),
        logits_multiplier=Attr("logit_scale"),
    ),
    tiny={**TINY, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None},
)


def _passes_with_every_control_caught(spec: ModelSpec) -> dict:
    registry = Registry(REGISTRY)
    registry.add(spec)
    assert spec.model_id in registry.resolve_model_ids(["all"])
    assert spec.model_id not in REGISTRY
    report = run_case(registry.lookup(spec.model_id), CONFIG)
    checks = [k for k in report if k.split("/")[1] not in CONTROLS]
    assert f"{DEFAULT}/{MATCHES_HF}" in checks and f"{DEFAULT}/numeric" in checks
    assert {k: _failed(report, k) for k in checks if _failed(report, k)} == {}
    controls = [f"{DEFAULT}/{c}" for c in CONTROLS]
    assert [k for k in controls if not _failed(report, k)] == []
    return report


@pytest.mark.slow
def test_a_family_added_from_a_spec_runs_an_equivalence_case():
    _passes_with_every_control_caught(PHI3)


@pytest.mark.slow
def test_a_parallel_family_with_a_layernorm_epsilon_added_from_a_spec_runs_a_case():
    """Cohere's layer reduces both branches at once: one collective per layer, in the layer."""
    report = _passes_with_every_control_caught(COHERE)
    for result in report[f"{DEFAULT}/collective-counts"]:
        assert result.detail.startswith("2 collectives (sum) in 2 modules"), result.detail


@pytest.mark.parametrize(
    ("wrong", "detail"),
    [
        ({"layer": Block("sequential")}, "unknown to HF (e.g. ['model.layers.0.post_attention"),
        ({"attention": Block("attention")}, "max |IR - HF|"),  # RoPE on halves, not pairs
        (
            {"norm": Block("layer_norm")},
            "unknown to HF (e.g. ['model.layers.0.input_layernorm.bias",
        ),
        ({"norm_eps": 0.1}, "max |IR - HF|"),
    ],
    ids=["sequential-layer", "rope-halves", "norm-bias", "epsilon"],
)
def test_cohere_with_a_wrong_composition_rope_or_norm_fails(wrong, detail):
    """What Cohere's entry declares is load-bearing; the entry as declared matches HF."""
    assert matches_hf_check(COHERE, {}).ok, matches_hf_check(COHERE, {}).detail
    wrong_spec = dataclasses.replace(COHERE, arch=dataclasses.replace(COHERE.arch, **wrong))
    result = matches_hf_check(wrong_spec, {})
    assert not result.ok and detail in result.detail, result.detail


@pytest.mark.slow
def test_llama_registered_with_the_qwen3_ir_fails_its_equivalence_case():
    """Sharded == unsharded holds for the wrong IR too: only the check against HF catches it."""
    llama = REGISTRY["meta-llama/Llama-3.1-8B"]
    registry = Registry()
    registry.add(dataclasses.replace(llama, arch=REGISTRY["Qwen/Qwen3-8B"].arch))
    report = run_case(registry.lookup(llama.model_id), CONFIG)
    assert _failed(report, f"{DEFAULT}/{MATCHES_HF}"), "the wrong IR matched HF's Llama"
    assert _failed(report, f"{DEFAULT}/numeric") == []  # what the sharded checks alone would say


@pytest.mark.slow
def test_a_case_on_gloo_in_bf16_checks_in_bf16_with_its_tolerance():
    """``--sharding-ir-gloo-dtype bf16``: the sharded checks as NCCL runs them, on the CPU; every
    check passes and every control is caught there too (matches-hf stays fp32)."""
    report = run_case(PHI3, CONFIG, gloo_dtype="bf16")
    assert all("torch.bfloat16" in r.detail for r in report[f"{DEFAULT}/numeric"])
    assert "tol 1e-05" in report[f"{DEFAULT}/{MATCHES_HF}"][0].detail
    checks = [k for k in report if k.split("/")[1] not in CONTROLS]
    assert {k: _failed(report, k) for k in checks if _failed(report, k)} == {}
    controls = [f"{DEFAULT}/{c}" for c in CONTROLS]
    assert [k for k in controls if not _failed(report, k)] == []
