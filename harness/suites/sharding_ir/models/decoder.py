"""The IR causal LM: one decoder for every family, composed of the blocks its spec names
(``blocks.build`` by kind: attention, a feed-forward block, norms placed as the spec says), with
HF's parameter names. It never names a block: a new block is a module of ``blocks/``."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor, nn

from stagebot.harness.suites.sharding_ir import blocks
from stagebot.harness.suites.sharding_ir.blocks._parts import Shapes
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.family import Arch, ArchSpec


class RotaryEmbedding(nn.Module):
    """Default RoPE, as HF computes it (``inv_freq`` a non-persistent buffer of the same name)."""

    def __init__(self, a: Arch) -> None:
        super().__init__()
        dim = a.head_dim
        inv_freq = 1.0 / (a.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class DecoderLayer(nn.Module):
    def __init__(self, a: Arch, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = blocks.build("attention", a.attention, a, layer_idx)
        ffn = blocks.build("ffn", a.moe, a, layer_idx) if a.moe else None
        use = a.moe if ffn is not None else a.mlp
        if ffn is None:
            ffn = blocks.build("ffn", a.mlp, a, layer_idx)
        self.ffn_name = use.params.get("module", "mlp")  # the family's name for the block
        self.add_module(self.ffn_name, ffn)
        self.norms = a.norms  # module names, None where the placement has no norm
        for name in filter(None, a.norms):
            self.add_module(name, blocks.build("norm", a.norm, a, a.hidden_size))
        self.residual_multiplier = a.residual_multiplier

    def _norm(self, name: str | None, x: Tensor) -> Tensor:
        return x if name is None else self.get_submodule(name)(x)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        r, ffn = self.residual_multiplier, self.get_submodule(self.ffn_name)
        before_attn, after_attn, before_ffn, after_ffn = self.norms
        x = x + self._norm(after_attn, self.self_attn(self._norm(before_attn, x), cos, sin)) * r
        return x + self._norm(after_ffn, ffn(self._norm(before_ffn, x))) * r


class DecoderModel(nn.Module):
    def __init__(self, a: Arch) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab_size, a.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(a, i) for i in range(a.num_layers))
        self.norm = blocks.build("norm", a.norm, a, a.hidden_size)
        self.rotary_emb = RotaryEmbedding(a)
        self.embedding_multiplier = a.embedding_multiplier

    def forward(self, input_ids: Tensor, position_ids: Tensor) -> Tensor:
        x = self.embed_tokens(input_ids) * self.embedding_multiplier
        cos, sin = self.rotary_emb(x, position_ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class IRForCausalLM(nn.Module):
    """``forward(input_ids, position_ids) -> logits`` for ``config`` (an HF config) as ``spec``
    describes the family; with ``fixed_routing`` its MoE blocks pick experts by token position,
    so rounding cannot flip the choice between sharded and unsharded runs."""

    def __init__(self, config, spec: ArchSpec, fixed_routing: bool = False) -> None:
        super().__init__()
        self.config = config
        self.arch = a = replace(spec.resolve(config), fixed_routing=fixed_routing)
        if a.tied_embeddings:
            raise ValueError("IR models keep lm_head separate: set tie_word_embeddings=False")
        self.model = DecoderModel(a)
        self.lm_head = nn.Linear(a.hidden_size, a.vocab_size, bias=False)

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
