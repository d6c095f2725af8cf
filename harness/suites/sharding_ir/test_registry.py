"""The model registry and the suite's options: id resolution, variants, a light options module."""

from __future__ import annotations

import ast
import dataclasses
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from stagebot.harness.suites.sharding_ir.dist_config import NAMED_CONFIGS, DistConfig
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
from stagebot.harness.suites.sharding_ir.family import ArchSpec, Attr, Block, Formula, Item
from stagebot.harness.suites.sharding_ir.registry import REGISTRY, Registry


def test_all_expands_to_every_registered_id_once():
    assert REGISTRY.resolve_model_ids(["all"]) == list(REGISTRY)
    assert REGISTRY.resolve_model_ids(["Qwen/Qwen3-8B", "all"]) == list(REGISTRY)
    assert REGISTRY.resolve_model_ids([]) == []


def test_unknown_id_suggests_the_closest():
    with pytest.raises(ShardingIRError, match=r"'Qwen/Qwen3-8b'.*Did you mean 'Qwen/Qwen3-8B'"):
        REGISTRY.lookup("Qwen/Qwen3-8b")


@pytest.mark.parametrize("name", list(NAMED_CONFIGS))
@pytest.mark.parametrize("model_id", list(REGISTRY))
def test_variants_exercise_what_they_name(model_id, name):
    """Read back through the family's own spec: each variant's overrides land where it says."""
    spec, dc = REGISTRY[model_id], DistConfig.named(name)
    cases = dict(spec.cases(dc))
    arch = spec.arch.resolve(spec.config(**cases["kv-heads-below-tp"]))
    assert 1 <= arch.num_kv_heads < dc.tp_size
    if spec.arch.moe is None or dc.moe_ep < 2:
        assert "experts-not-divisible-by-ep" not in cases
    else:
        arch = spec.arch.resolve(spec.config(**cases["experts-not-divisible-by-ep"]))
        assert arch.moe.params["num_experts"] % dc.moe_ep != 0
        assert spec.arch.resolve(spec.config()).moe.params["num_experts"] % dc.moe_ep == 0


def test_a_spec_naming_an_attribute_the_config_lacks_says_which():
    spec = REGISTRY["mistralai/Mixtral-8x7B-v0.1"]
    arch = dataclasses.replace(
        spec.arch, moe=spec.arch.moe.but(num_experts=Attr("n_routed_experts"))
    )
    with pytest.raises(
        ShardingIRError,
        match=r"Mixtral-8x7B-v0.1: moe.num_experts reads MixtralConfig.n_routed_experts, which",
    ):
        arch.resolve(spec.config(), spec.model_id)


def test_a_value_computed_from_the_config_resolves_and_travels_to_the_ranks():
    """``sqrt(hidden)``-style values: arithmetic on ``Attr`` is data (a spec is pickled to each
    rank and compared by value), read from the config when the spec is resolved."""
    spec = ArchSpec(
        embedding_multiplier=Attr("hidden_size") ** 0.5,
        logits_multiplier=1 / Attr("logits_scaling"),
        attention=Block(
            "attention", scale=2 * Attr("attention_multiplier") / Attr("num_attention_heads")
        ),
    )
    assert pickle.loads(pickle.dumps(spec)) == spec
    config = REGISTRY["ibm-granite/granite-3.1-3b-a800m-instruct"].config()
    arch = spec.resolve(config)
    assert arch.embedding_multiplier == 8.0  # hidden 64
    assert arch.logits_multiplier == 1 / 6.0
    assert arch.attention.params["scale"] == 2 * 0.015625 / 4
    with pytest.raises(ShardingIRError, match=r"reads GraniteMoeConfig.hidden, which that config"):
        ArchSpec(residual_multiplier=Attr("hidden") ** -0.5).resolve(config)


def test_a_registry_refuses_an_id_twice():
    registry = Registry()
    registry.add(REGISTRY["Qwen/Qwen3-8B"])
    with pytest.raises(ShardingIRError, match=r"'Qwen/Qwen3-8B' is registered already"):
        registry.add(REGISTRY["Qwen/Qwen3-8B"])


def test_dist_config_choices_are_the_named_configs():
    from stagebot.harness.suites.sharding_ir import options

    seen = {}

    class Group:
        def addoption(self, name, **kwargs):
            seen[name] = kwargs

    options.add_options(Group())
    assert seen["--sharding-ir-dist-config"]["choices"] == tuple(NAMED_CONFIGS)


def test_gloo_dtype_choices_are_the_workers_dtypes():
    from stagebot.harness.suites.sharding_ir import options
    from stagebot.harness.suites.sharding_ir.worker import GLOO_DTYPES

    assert options.GLOO_DTYPES == tuple(GLOO_DTYPES)


def test_options_module_stays_light():
    code = (
        "import sys, stagebot.harness.suites.sharding_ir.options; "
        "assert 'torch' not in sys.modules, 'options imports torch'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    code = (
        "import sys, stagebot.harness.suites.sharding_ir.options as o, "
        "stagebot.harness.suites.sharding_ir.registry; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'heavy import'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _config_names() -> set[str]:
    """Every HF config attribute a registered family's spec or tiny settings names (the spec's
    defaults, ``rms_norm_eps`` ..., too)."""
    names = set()
    for spec in REGISTRY.values():
        names |= set(spec.tiny)
        values = list(vars(spec.arch).values())
        for v in values:  # grows as blocks and formulas are opened
            if isinstance(v, Block):
                values += [p for _, p in v.params]
            elif isinstance(v, Formula):
                values += list(v.operands)
        names |= {v.name for v in values if isinstance(v, Attr | Item)}
    return names


def _names_a_config_key(node: ast.AST, names: set[str]) -> bool:
    """A string constant that is a config name, or ``config.<name>`` / ``<x>.config.<name>``."""
    if isinstance(node, ast.Constant):
        return node.value in names
    if isinstance(node, ast.Attribute) and node.attr in names:
        owner = node.value
        return getattr(owner, "id", None) == "config" or getattr(owner, "attr", None) == "config"
    return False


def test_the_checks_and_blocks_never_name_a_config_key():
    """Only the spec (family.py, registry.py) maps config names: a check or a block that looked
    one up itself would work for the families that use that name and break for the next."""
    suite = Path(__file__).parent
    modules = [*suite.glob("models/*.py"), *suite.glob("blocks/*.py")] + [
        suite / name
        for name in (
            "build.py",
            "case.py",
            "checks.py",
            "conftest.py",
            "hf_reference.py",
            "sharding.py",
            "test_equivalence.py",
            "worker.py",
        )
    ]
    names = _config_names()
    assert {"num_experts", "num_local_experts", "attention_bias", "qkv_bias"} <= names
    assert {"rms_norm_eps", "num_key_value_heads", "rope_parameters"} <= names
    found = {
        f"{path.name}:{node.lineno}: {ast.unparse(node)}"
        for path in modules
        for node in ast.walk(ast.parse(path.read_text()))
        if _names_a_config_key(node, names)
    }
    assert found == set()


@pytest.mark.parametrize(
    ("arch", "message"),
    [
        (ArchSpec(attention=Block("atention")), r"unknown attention block 'atention'; registered "),
        (ArchSpec(norm=Block("gated_mlp")), r"unknown norm block 'gated_mlp'; registered norm"),
        (
            ArchSpec(mlp=Block("gated_mlp", fused_gate_up=True)),
            r"ffn block 'gated_mlp' has no parameter 'fused_gate_up'; its parameters: bias, fused",
        ),
        (ArchSpec(attention=Block("attention", qk_norm="all")), r"unknown qk_norm 'all'"),
    ],
    ids=["name", "kind", "parameter", "value"],
)
def test_a_wrong_block_is_named_with_what_would_be_right(arch, message):
    from stagebot.harness.suites.sharding_ir.models.decoder import IRForCausalLM

    with pytest.raises(ShardingIRError, match=message):
        IRForCausalLM(REGISTRY["Qwen/Qwen3-8B"].config(), arch)


def test_blocks_are_found_by_module():
    """Every module of blocks/ registers its blocks: nothing else lists them."""
    from stagebot.harness.suites.sharding_ir import blocks

    assert {"rms_norm": "norm", "attention": "attention", "gated_mlp": "ffn"}.items() <= (
        blocks.registered().items()
    )
    assert blocks.registered()["sparse_moe"] == "ffn"


def _phi2_config_with(**arch):
    spec = REGISTRY["microsoft/phi-2"]
    return dataclasses.replace(spec.arch, **arch), spec.config()


@pytest.mark.parametrize(
    ("arch", "message"),
    [
        (
            {"norm_eps": Attr("rms_norm_eps")},  # ArchSpec's default name, which PhiConfig lacks
            r"microsoft/phi-2: ArchSpec.norm_eps reads PhiConfig.rms_norm_eps, which that config "
            r"class lacks: declare the name it uses",
        ),
        (
            {"num_kv_heads": Attr("n_kv_heads")},
            r"microsoft/phi-2: ArchSpec.num_kv_heads reads PhiConfig.n_kv_heads, which",
        ),
        (
            {"rotary_fraction": Item("rope_parameters", "rotary_pct")},
            r"ArchSpec.rotary_fraction reads PhiConfig.rope_parameters\['rotary_pct'\], which",
        ),
        (
            {"attention": Block("attention", bias=Attr("qkv_bias"))},
            r"microsoft/phi-2: attention.bias reads PhiConfig.qkv_bias, which",
        ),
        (
            {"rotary_fraction": 1.5},
            r"ArchSpec.rotary_fraction is 1.5: it must be a number in \(0, 1]",
        ),
        ({"norm_eps": -1e-5}, r"ArchSpec.norm_eps is -1e-05: it must be a float in \(0, 1\)"),
        ({"num_heads": 4.0}, r"ArchSpec.num_heads is 4.0: it must be a positive int"),
        ({"num_kv_heads": 3}, r"microsoft/phi-2: 4 heads are no multiple of 3 KV heads"),
    ],
    ids=["epsilon", "kv-heads", "rotary-key", "block-param", "fraction", "eps", "heads", "kv"],
)
def test_a_missing_or_wrong_config_value_names_the_entry_and_the_name(arch, message):
    arch, config = _phi2_config_with(**arch)
    with pytest.raises(ShardingIRError, match=message):
        arch.resolve(config, "microsoft/phi-2")


def test_a_declared_default_applies_only_where_the_config_lacks_the_name():
    arch, config = _phi2_config_with(
        norm_eps=Attr("rms_norm_eps", default=1e-3), head_dim=Attr("head_dim", default=None)
    )
    assert not hasattr(config, "rms_norm_eps")
    resolved = arch.resolve(config)
    assert resolved.norm_eps == 1e-3  # the default
    assert resolved.rotary_dim == 8  # PhiConfig's partial_rotary_factor 0.5, read not defaulted
    resolved = dataclasses.replace(arch, norm_eps=Attr("layer_norm_eps", default=1e-3))
    assert resolved.resolve(config).norm_eps == config.layer_norm_eps != 1e-3


def test_the_decoder_never_names_a_block_nor_a_composition():
    """The decoder builds each layer by kind: a family's layer is its entry's choice alone."""
    from stagebot.harness.suites.sharding_ir import blocks
    from stagebot.harness.suites.sharding_ir.blocks.layer import PLACEMENTS

    decoder = Path(__file__).parent / "models" / "decoder.py"
    names = set(blocks.registered()) | set(PLACEMENTS) | {"input_layernorm", "parallel"}
    found = {
        f"decoder.py:{node.lineno}: {node.value!r}"
        for node in ast.walk(ast.parse(decoder.read_text()))
        if isinstance(node, ast.Constant) and node.value in names
    }
    assert found == set()
    assert blocks.registered()["parallel"] == blocks.registered()["sequential"] == "layer"
