"""The IR causal LM: one decoder class for every family, its blocks chosen by the resolved
``Arch`` of the family's spec (``registry.ModelSpec.arch``), with HF's parameter names."""

from __future__ import annotations

from torch import Tensor, nn

from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.family import Arch, ArchSpec
from stagebot.harness.suites.sharding_ir.models.layers import (
    MLP,
    Attention,
    RMSNorm,
    RotaryEmbedding,
    Shapes,
)
from stagebot.harness.suites.sharding_ir.models.moe import SparseMoeBlock, fuse_experts


class DecoderLayer(nn.Module):
    def __init__(self, a: Arch, layer_idx: int, fixed_routing: bool) -> None:
        super().__init__()
        self.self_attn = Attention(a)
        sparse = a.moe is not None and layer_idx in a.moe.sparse_layers
        self.mlp_name = a.moe.block if sparse else "mlp"  # the family's name for the MoE block
        self.add_module(self.mlp_name, SparseMoeBlock(a, fixed_routing) if sparse else MLP.dense(a))
        self.norms = a.norms  # module names, None where the placement has no norm
        for name in filter(None, a.norms):
            self.add_module(name, RMSNorm(a.hidden_size, a))
        self.residual_multiplier = a.residual_multiplier

    def _norm(self, name: str | None, x: Tensor) -> Tensor:
        return x if name is None else self.get_submodule(name)(x)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        r, mlp = self.residual_multiplier, self.get_submodule(self.mlp_name)
        before_attn, after_attn, before_mlp, after_mlp = self.norms
        x = x + self._norm(after_attn, self.self_attn(self._norm(before_attn, x), cos, sin)) * r
        return x + self._norm(after_mlp, mlp(self._norm(before_mlp, x))) * r


class DecoderModel(nn.Module):
    def __init__(self, a: Arch, fixed_routing: bool) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab_size, a.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(a, i, fixed_routing) for i in range(a.num_layers))
        self.norm = RMSNorm(a.hidden_size, a)
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
        self.arch = a = spec.resolve(config)
        if a.tied_embeddings:
            raise ValueError("IR models keep lm_head separate: set tie_word_embeddings=False")
        self.model = DecoderModel(a, fixed_routing)
        self.lm_head = nn.Linear(a.hidden_size, a.vocab_size, bias=False)

    def forward(self, input_ids: Tensor, position_ids: Tensor) -> Tensor:
        return self.lm_head(self.model(input_ids, position_ids)) * self.arch.logits_multiplier

    def _reduced_blocks(self):
        """The blocks that end in an all-reduce: each states its own plan (and its parts')."""
        return [(n, m) for n, m in self.named_modules() if getattr(m, "collectives", 0)]

    def expected_local_shapes(self, dc: DistConfig) -> Shapes:
        """Every parameter's shape on ``dc``'s rank; None for a parameter the rank drops."""
        shapes: Shapes = {name: tuple(p.shape) for name, p in self.named_parameters()}
        if dc.world_size < 2:
            return shapes
        for prefix, block in self._reduced_blocks():
            shapes |= {f"{prefix}.{k}": v for k, v in block.local_shapes(dc).items()}
        return shapes

    def expected_collectives(self, dc: DistConfig) -> dict[str, int]:
        """Module path -> collectives its forward issues once sharded (none unsharded)."""
        if dc.world_size < 2:
            return {}
        return {name: block.collectives for name, block in self._reduced_blocks()}

    @staticmethod
    def to_hf_state_dict(state: dict[str, Tensor]) -> dict[str, Tensor]:
        """This IR's (checkpoint-named) state dict in the layout HF classes keep in memory."""
        return fuse_experts(state)
