"""The IR causal LM: one decoder for every family, composed of the blocks its spec names
(``blocks.build`` by kind: each layer is the family's layer block, which builds and composes its
attention, feed-forward block and norms), with HF's parameter names. It never names a block nor
branches on a family: a new block is a module of ``blocks/``."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor, nn

from stagebot.harness.suites.sharding_ir import blocks
from stagebot.harness.suites.sharding_ir.blocks._parts import Shapes
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.family import Arch, ArchSpec


class RotaryEmbedding(nn.Module):
    """Default RoPE, as HF computes it (``inv_freq`` a non-persistent buffer of the same name),
    over the rotated dims of a head (all, or the family's rotary fraction of them)."""

    def __init__(self, a: Arch) -> None:
        super().__init__()
        dim = a.rotary_dim
        inv_freq = 1.0 / (a.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class DecoderModel(nn.Module):
    def __init__(self, a: Arch) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab_size, a.hidden_size)
        self.layers = nn.ModuleList(
            blocks.build("layer", a.layer, a, i) for i in range(a.num_layers)
        )
        self.final_norm = a.final_norm  # the family's name for it
        self.add_module(a.final_norm, blocks.build("norm", a.norm, a, a.hidden_size))
        self.rotary_emb = RotaryEmbedding(a)
        self.embedding_multiplier = a.embedding_multiplier

    def forward(self, input_ids: Tensor, position_ids: Tensor) -> Tensor:
        x = self.embed_tokens(input_ids) * self.embedding_multiplier
        cos, sin = self.rotary_emb(x, position_ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.get_submodule(self.final_norm)(x)


class IRForCausalLM(nn.Module):
    """``forward(input_ids, position_ids) -> logits`` for ``config`` (an HF config) as ``spec``
    describes the family (``entry``, its model id, names it in errors); with ``fixed_routing``
    its MoE blocks pick experts by token position, so rounding cannot flip the choice between
    sharded and unsharded runs."""

    def __init__(
        self, config, spec: ArchSpec, fixed_routing: bool = False, entry: str = "a family"
    ) -> None:
        super().__init__()
        self.config = config
        self.arch = a = replace(spec.resolve(config, entry), fixed_routing=fixed_routing)
        if a.tied_embeddings:
            raise ValueError("IR models keep lm_head separate: set tie_word_embeddings=False")
        self.model = DecoderModel(a)
        self.lm_head = nn.Linear(a.hidden_size, a.vocab_size, bias=a.lm_head_bias)

    def forward(self, input_ids: Tensor, position_ids: Tensor) -> Tensor:
        logits = self.lm_head(self.model(input_ids, position_ids)) * self.arch.logits_multiplier
        cap = self.arch.logits_softcap
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def _planners(self) -> list[tuple[str, nn.Module]]:
        """The outermost blocks that state their parts' local shapes."""
        found: list[tuple[str, nn.Module]] = []
        for name, module in self.named_modules():
            inside = any(name.startswith(f"{outer}.") for outer, _ in found)
            if hasattr(module, "local_shapes") and not inside:
                found.append((name, module))
        return found

    def expected_local_shapes(self, dc: DistConfig) -> Shapes:
        """Every parameter's shape on ``dc``'s rank; None for a parameter the rank drops."""
        shapes: Shapes = {name: tuple(p.shape) for name, p in self.named_parameters()}
        if dc.world_size < 2:
            return shapes
        for prefix, block in self._planners():
            shapes |= {f"{prefix}.{k}": v for k, v in block.local_shapes(dc).items()}
        return shapes

    def expected_collectives(self, dc: DistConfig) -> dict[tuple[str, str], int]:
        """(module path, reduce op) -> collectives that module's own forward issues once sharded
        (none unsharded)."""
        if dc.world_size < 2:
            return {}
        return {
            (name, op): n
            for name, module in self.named_modules()
            for op, n in getattr(module, "collectives", {}).items()
            if n
        }

    def expected_followers(self) -> dict[str, str]:
        """Parameter -> the parameter whose row split it follows (a norm weight, its projection)."""
        return {
            f"{name}.{follower}": f"{name}.{leader}"
            for name, module in self.named_modules()
            for follower, leader in getattr(module, "follows", {}).items()
        }
