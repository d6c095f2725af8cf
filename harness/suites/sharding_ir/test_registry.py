"""The model registry and the suite's options: id resolution, variants, a light options module."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stagebot.harness.suites.sharding_ir.dist_config import NAMED_CONFIGS, DistConfig
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
from stagebot.harness.suites.sharding_ir.registry import REGISTRY, lookup, resolve_model_ids


def test_all_expands_to_every_registered_id_once():
    assert resolve_model_ids(["all"]) == list(REGISTRY)
    assert resolve_model_ids(["Qwen/Qwen3-8B", "all"]) == list(REGISTRY)
    assert resolve_model_ids([]) == []


def test_unknown_id_suggests_the_closest():
    with pytest.raises(ShardingIRError, match=r"'Qwen/Qwen3-8b'.*Did you mean 'Qwen/Qwen3-8B'"):
        lookup("Qwen/Qwen3-8b")


@pytest.mark.parametrize("name", list(NAMED_CONFIGS))
def test_variants_exercise_what_they_name(name):
    dc = DistConfig.named(name)
    kv = REGISTRY["Qwen/Qwen3-8B"].variants["kv-heads-below-tp"](dc)
    assert 1 <= kv["num_key_value_heads"] < dc.tp_size
    experts = REGISTRY["Qwen/Qwen3-30B-A3B"].variants["experts-not-divisible-by-ep"](dc)
    if dc.moe_ep < 2:
        assert experts is None
    else:
        assert experts["num_experts"] % dc.moe_ep != 0


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
