"""Adding a family is adding an entry: families the suite does not register (Phi-3, whose
checkpoints fuse q/k/v and gate/up; Gemma-2 without its soft-capping, for sandwich norms and
values computed from the config) go into a temporary registry from their spec alone and run an
equivalence case; and a family registered with another family's spec fails its case."""

from __future__ import annotations

import dataclasses

import pytest

from stagebot.harness.suites.sharding_ir.case import MATCHES_HF, run_case
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
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
# Gemma-2's decoder but for soft-capping, which the IR lacks (off here; the real checkpoints cap
# attention and logits) and sliding windows (the default 4096 exceeds every tiny sequence).
GEMMA2 = ModelSpec(
    model_id="google/gemma-2-2b",
    config_class="Gemma2Config",
    hf_class="Gemma2ForCausalLM",
    arch=ArchSpec(
        attention=Block("attention", scale=Attr("query_pre_attn_scalar") ** -0.5),
        norm=Block("rms_norm", offset=1.0),
        norms="sandwich",
        activation=Attr("hidden_activation"),
        embedding_multiplier=Attr("hidden_size") ** 0.5,
    ),
    tiny={**TINY, "attn_logit_softcapping": None, "final_logit_softcapping": None}
    | {"query_pre_attn_scalar": 32},  # not head_dim (16), as Gemma-2 27B's is not
)


def _failed(report: dict, key: str) -> list[str]:
    return [r.detail for r in report[key] if not r.ok]


PHI3 = ModelSpec(
    model_id="microsoft/Phi-3-mini-4k-instruct",
    config_class="Phi3Config",
    hf_class="Phi3ForCausalLM",
    arch=ArchSpec(attention=Block("attention", fused_qkv=True), mlp=Block("gated_mlp", fused=True)),
    tiny={**TINY, "pad_token_id": None, "eos_token_id": None},
)


@pytest.mark.slow
@pytest.mark.parametrize("spec", [PHI3, GEMMA2], ids=lambda spec: spec.model_id)
def test_a_family_added_from_a_spec_runs_an_equivalence_case(spec):
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


@pytest.mark.slow
def test_llama_registered_with_the_qwen3_ir_fails_its_equivalence_case():
    """Sharded == unsharded holds for the wrong IR too: only the check against HF catches it."""
    llama = REGISTRY["meta-llama/Llama-3.1-8B"]
    registry = Registry()
    registry.add(dataclasses.replace(llama, arch=REGISTRY["Qwen/Qwen3-8B"].arch))
    report = run_case(registry.lookup(llama.model_id), CONFIG)
    assert _failed(report, f"{DEFAULT}/{MATCHES_HF}"), "the wrong IR matched HF's Llama"
    assert _failed(report, f"{DEFAULT}/numeric") == []  # what the sharded checks alone would say


@pytest.mark.parametrize(
    ("wrong", "detail"),
    [
        ({"norms": "pre"}, "missing from the IR (e.g. ['model.layers.0.pre_feedforward_layernorm"),
        ({"norm": Block("rms_norm")}, "max |IR - HF|"),
        ({"embedding_multiplier": 1.0}, "max |IR - HF|"),
        ({"attention": Block("attention")}, "max |IR - HF|"),
    ],
    ids=["norms", "norm_offset", "embedding_multiplier", "attention_scale"],
)
def test_gemma2_with_a_wrong_norm_placement_or_value_fails(wrong, detail):
    result = matches_hf_check(
        dataclasses.replace(GEMMA2, arch=dataclasses.replace(GEMMA2.arch, **wrong)), {}
    )
    assert not result.ok and detail in result.detail, result.detail


def test_an_unknown_norm_placement_is_named_with_the_known_ones():
    arch = dataclasses.replace(GEMMA2.arch, norms="postnorm")
    with pytest.raises(
        ShardingIRError, match=r"unknown norm placement 'postnorm'.*one of pre, post, sandwich"
    ):
        arch.resolve(GEMMA2.config())
