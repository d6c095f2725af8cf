"""Qwen3 (dense) IR model: every layer a hinted SwiGLU MLP."""

from __future__ import annotations

from torch import nn

from stagebot.harness.suites.sharding_ir.models.layers import MLP, IRForCausalLM


class Qwen3IRForCausalLM(IRForCausalLM):
    def make_mlp(self, config, layer_idx: int) -> nn.Module:
        return MLP(config.hidden_size, config.intermediate_size)
