"""Block behaviour the families' checks rely on but do not isolate: parameters drawn by role, the
parallel layer's collectives, an attention variant that overrides a method, and a layer that
cannot fuse its reduction with a block that does not leave one out."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from stagebot.harness.suites.sharding_ir import blocks
from stagebot.harness.suites.sharding_ir.blocks.attention import Attention
from stagebot.harness.suites.sharding_ir.blocks.interleaved_rope_attention import (
    InterleavedRopeAttention,
)
from stagebot.harness.suites.sharding_ir.build import build_ir_model, init_of
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
from stagebot.harness.suites.sharding_ir.family import Block
from stagebot.harness.suites.sharding_ir.registry import REGISTRY

PHI2, GEMMA2 = "microsoft/phi-2", "google/gemma-2-2b"


def _spread(model, suffix: str) -> tuple[float, float]:
    values = torch.cat([p.flatten() for n, p in model.named_parameters() if n.endswith(suffix)])
    return values.mean().item(), values.std().item()


def test_parameters_are_drawn_by_role():
    """Norm scales around the value that makes the norm an identity (Gemma's ``1 + weight``: 0),
    biases and matrices centred on 0, a matrix at std fan_in^-0.5."""
    phi = build_ir_model(REGISTRY[PHI2])
    mean, std = _spread(phi, "layernorm.weight")
    assert abs(mean - 1) < 0.05 and 0.05 < std < 0.15
    mean, std = _spread(phi, "layernorm.bias")
    assert abs(mean) < 0.05 and std < 0.15
    mean, std = _spread(phi, "self_attn.q_proj.weight")
    assert abs(mean) < 0.02 and abs(std - 64**-0.5) < 0.02
    mean, _ = _spread(build_ir_model(REGISTRY[GEMMA2]), "layernorm.weight")
    assert abs(mean) < 0.05  # scaled by 1 + weight: around 1 too


def test_a_norm_scale_of_any_shape_is_drawn_around_its_identity():
    """The role is the module's, not the shape's: a 2-D per-head scale is no matrix."""
    arch = REGISTRY[PHI2].arch.resolve(REGISTRY[PHI2].config())
    for name in ("rms_norm", "layer_norm"):
        norm = blocks.build("norm", Block(name).resolve(None), arch, 16)
        norm.weight = torch.nn.Parameter(torch.ones(4, 16))
        assert init_of(norm, "weight", norm.weight) == (1.0, 0.1)
        matrix = torch.nn.Linear(16, 4)
        assert init_of(matrix, "weight", matrix.weight) == (0.0, 0.25)


def test_a_parallel_layer_issues_one_collective_for_both_branches():
    model = build_ir_model(REGISTRY[PHI2])
    expected = model.expected_collectives(DistConfig.named("tep", 0))
    assert expected == {(f"model.layers.{i}", "sum"): 1 for i in range(2)}
    unfused = dataclasses.replace(
        REGISTRY[PHI2],
        arch=dataclasses.replace(REGISTRY[PHI2].arch, layer=Block("parallel", fused_reduce=False)),
    )
    expected = build_ir_model(unfused).expected_collectives(DistConfig.named("tep", 0))
    assert expected == {
        (f"model.layers.{i}.{branch}", "sum"): 1
        for i in range(2)
        for branch in ("self_attn", "mlp")
    }


def test_interleaved_rope_overrides_the_rotation_only():
    assert InterleavedRopeAttention.forward is Attention.forward
    assert {"rotate", "rope"} == {
        name for name, v in vars(InterleavedRopeAttention).items() if callable(v)
    }
    x = torch.arange(4.0)
    assert torch.equal(InterleavedRopeAttention.rotate(None, x), torch.tensor([-1.0, 0, -3, 2]))
    assert torch.equal(Attention.rotate(None, x), torch.tensor([-2.0, -3, 0, 1]))


def test_a_fused_layer_refuses_a_branch_that_always_reduces():
    """A builder without ``reduce`` cannot leave its partial sums to the layer: named, with the
    way out."""

    @blocks.register("ffn", "test_reducing_mlp")
    def _reducing(a, layer, *, bias: bool = False):
        return blocks.build("ffn", Block("gated_mlp").resolve(None), a, layer)

    try:
        spec = REGISTRY[PHI2]
        arch = dataclasses.replace(spec.arch, mlp=Block("test_reducing_mlp"))
        with pytest.raises(ShardingIRError, match=r"'test_reducing_mlp' takes no 'reduce' from"):
            build_ir_model(dataclasses.replace(spec, arch=arch))
    finally:
        del blocks._BUILDERS["test_reducing_mlp"]
