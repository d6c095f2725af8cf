"""The model registry and the suite's options: id resolution, variants, a light options module."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from stagebot.harness.suites.sharding_ir.dist_config import NAMED_CONFIGS, DistConfig
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
from stagebot.harness.suites.sharding_ir.family import Attr
from stagebot.harness.suites.sharding_ir.registry import (
    REGISTRY,
    Registry,
    lookup,
    resolve_model_ids,
)


def test_all_expands_to_every_registered_id_once():
    assert resolve_model_ids(["all"]) == list(REGISTRY)
    assert resolve_model_ids(["Qwen/Qwen3-8B", "all"]) == list(REGISTRY)
    assert resolve_model_ids([]) == []


def test_unknown_id_suggests_the_closest():
    with pytest.raises(ShardingIRError, match=r"'Qwen/Qwen3-8b'.*Did you mean 'Qwen/Qwen3-8B'"):
        lookup("Qwen/Qwen3-8b")


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
        assert arch.moe.num_experts % dc.moe_ep != 0
        assert spec.arch.resolve(spec.config()).moe.num_experts % dc.moe_ep == 0


def test_a_spec_naming_an_attribute_the_config_lacks_says_which():
    spec = REGISTRY["mistralai/Mixtral-8x7B-v0.1"]
    wrong = dataclasses.replace(spec.arch.moe, num_experts=Attr("n_routed_experts"))
    arch = dataclasses.replace(spec.arch, moe=wrong)
    with pytest.raises(ShardingIRError, match=r"MixtralConfig has no attribute 'n_routed_experts'"):
        arch.resolve(spec.config())


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
