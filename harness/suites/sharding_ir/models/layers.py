"""Building blocks shared by the IR models: norms, RoPE, hinted attention and MLP, the decoder.

Each hinted block also states, in closed form, the local shapes it expects after sharding and how
many collectives its forward issues: the structural checks compare the sharded graph against
these, independently of how ``apply_sharding_hints`` computes them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stagebot.harness.suites.sharding_ir import hints
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig

Shapes = dict[str, tuple[int, ...] | None]  # parameter name -> local shape (None: dropped)


def head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class RotaryEmbedding(nn.Module):
    """Default RoPE, as HF computes it (``inv_freq`` a non-persistent buffer of the same name)."""

    def __init__(self, config) -> None:
        super().__init__()
        dim = head_dim(config)
        base = config.rope_parameters["rope_theta"]
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + _rotate_half(x) * sin


def _split(size: int, parts: int, min_size: int = 1) -> int:
    """Closed-form local size: an even share, or one ``min_size`` unit if parts outnumber units."""
    return max(size // parts, min_size)


class Attention(nn.Module):
    """Qwen3 attention: q/k/v colwise by heads (KV replicated if fewer than TP), o_proj rowwise."""

    collectives = 1

    def __init__(self, config) -> None:
        super().__init__()
        hidden, bias = config.hidden_size, config.attention_bias
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = head_dim(config)
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)

    def _project(self, x: Tensor, proj: nn.Linear, heads: int) -> Tensor:
        b, s = x.shape[:2]
        y = hints.linear(x, proj.weight, proj.bias, "colwise", None, self.head_dim, "attention")
        return hints.view(y, [b, s, heads, self.head_dim], 2)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        b, s = x.shape[:2]
        q = self.q_norm(self._project(x, self.q_proj, self.num_heads)).transpose(1, 2)
        k = self.k_norm(self._project(x, self.k_proj, self.num_kv_heads)).transpose(1, 2)
        v = self._project(x, self.v_proj, self.num_kv_heads).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=self.head_dim**-0.5, enable_gqa=True
        )
        out = hints.view(out.transpose(1, 2), [b, s, self.num_heads * self.head_dim], 2)
        o = self.o_proj
        out = hints.linear(out, o.weight, o.bias, "rowwise", None, self.head_dim, "attention")
        return hints.all_reduce(out)

    def local_shapes(self, dc: DistConfig) -> Shapes:
        hidden, hd, tp = self.o_proj.out_features, self.head_dim, dc.tp_size
        q_rows = _split(self.num_heads, tp) * hd
        kv_rows = _split(self.num_kv_heads, tp) * hd
        shapes: Shapes = {
            "q_proj.weight": (q_rows, hidden),
            "k_proj.weight": (kv_rows, hidden),
            "v_proj.weight": (kv_rows, hidden),
            "o_proj.weight": (hidden, q_rows),
        }
        if self.o_proj.bias is not None:
            shapes |= {
                "q_proj.bias": (q_rows,),
                "k_proj.bias": (kv_rows,),
                "v_proj.bias": (kv_rows,),
            }
        return shapes


class MLP(nn.Module):
    """SwiGLU MLP: gate/up colwise, down rowwise, one all-reduce."""

    collectives = 1

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate = hints.linear(x, self.gate_proj.weight, None, "colwise")
        up = hints.linear(x, self.up_proj.weight, None, "colwise")
        down = hints.linear(F.silu(gate) * up, self.down_proj.weight, None, "rowwise")
        return hints.all_reduce(down)

    def local_shapes(self, dc: DistConfig) -> Shapes:
        return swiglu_local_shapes(self, dc.tp_size)


def swiglu_local_shapes(mlp: nn.Module, tp: int) -> Shapes:
    hidden, inter = mlp.gate_proj.in_features, _split(mlp.gate_proj.out_features, tp)
    return {
        "gate_proj.weight": (inter, hidden),
        "up_proj.weight": (inter, hidden),
        "down_proj.weight": (hidden, inter),
    }


class DecoderLayer(nn.Module):
    def __init__(self, config, mlp: nn.Module) -> None:
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = mlp
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderModel(nn.Module):
    def __init__(self, config, layers: list[DecoderLayer]) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config)

    def forward(self, input_ids: Tensor, position_ids: Tensor) -> Tensor:
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb(x, position_ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class IRForCausalLM(nn.Module):
    """Base of the IR causal LMs: ``forward(input_ids, position_ids) -> logits``.

    A family subclass supplies ``make_mlp(config, layer_idx)``; with ``fixed_routing`` its MoE
    blocks pick experts by token position, so rounding cannot flip the choice between runs.
    """

    def __init__(self, config, fixed_routing: bool = False) -> None:
        super().__init__()
        if config.tie_word_embeddings:
            raise ValueError("IR models keep lm_head separate: set tie_word_embeddings=False")
        self.config = config
        self.fixed_routing = fixed_routing
        layers = [
            DecoderLayer(config, self.make_mlp(config, i)) for i in range(config.num_hidden_layers)
        ]
        self.model = DecoderModel(config, layers)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def make_mlp(self, config, layer_idx: int) -> nn.Module:
        raise NotImplementedError

    def forward(self, input_ids: Tensor, position_ids: Tensor) -> Tensor:
        return self.lm_head(self.model(input_ids, position_ids))

    def expected_local_shapes(self, dc: DistConfig) -> Shapes:
        """Every parameter's shape on ``dc``'s rank; None for a parameter the rank drops."""
        shapes: Shapes = {name: tuple(p.shape) for name, p in self.named_parameters()}
        if dc.world_size < 2:
            return shapes
        for prefix, module in self.named_modules():
            if hasattr(module, "local_shapes"):
                shapes |= {f"{prefix}.{k}": v for k, v in module.local_shapes(dc).items()}
        return shapes

    def expected_collectives(self, dc: DistConfig) -> dict[str, int]:
        """Module path -> collectives its forward issues once sharded (none unsharded)."""
        if dc.world_size < 2:
            return {}
        return {
            name: m.collectives for name, m in self.named_modules() if hasattr(m, "collectives")
        }

    @staticmethod
    def to_hf_state_dict(state: dict[str, Tensor]) -> dict[str, Tensor]:
        """This IR's (checkpoint-named) state dict in the layout the HF class keeps in memory."""
        return dict(state)
