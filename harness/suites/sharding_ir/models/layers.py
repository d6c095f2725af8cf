"""Building blocks of the IR decoders, each built from a resolved ``Arch`` (what the family has):
norms, RoPE, hinted attention (q/k norm or not, biases, q/k/v separate or fused, the family's
softmax scale) and the hinted gated MLP (the family's activation, bias or not, gate/up separate or
fused).

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
from stagebot.harness.suites.sharding_ir.family import Arch

Shapes = dict[str, tuple[int, ...] | None]  # parameter name -> local shape (None: dropped)


class RMSNorm(nn.Module):
    """RMS norm scaled by ``norm_weight_offset + weight`` (Gemma's norms keep ``weight - 1``)."""

    def __init__(self, size: int, a: Arch) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps, self.offset = a.rms_norm_eps, a.norm_weight_offset

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.offset + self.weight) * x.to(dtype)


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


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + _rotate_half(x) * sin


def split_size(size: int, parts: int, min_size: int = 1) -> int:
    """Closed-form local size: an even share, or one ``min_size`` unit if parts outnumber units."""
    return max(size // parts, min_size)


def _colwise(x: Tensor, proj: nn.Linear, pieces: list[int] | None, min_local: int = 1, kind="mlp"):
    """A colwise-hinted projection; a fused weight (``pieces``) comes back split into its pieces."""
    y = hints.linear(x, proj.weight, proj.bias, "colwise", pieces, min_local, kind)
    return hints.split_with_sizes(y, pieces, -1, True) if pieces else y


class Attention(nn.Module):
    """q/k/v colwise by heads (KV replicated if fewer than TP), o_proj rowwise, one all-reduce."""

    collectives = 1

    def __init__(self, a: Arch) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = a.num_heads, a.num_kv_heads, a.head_dim
        hidden, q, kv = a.hidden_size, a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
        self.fused = a.fused_qkv
        if self.fused:
            self.qkv_proj = nn.Linear(hidden, q + 2 * kv, bias=a.qkv_bias)
        else:
            self.q_proj = nn.Linear(hidden, q, bias=a.qkv_bias)
            self.k_proj = nn.Linear(hidden, kv, bias=a.qkv_bias)
            self.v_proj = nn.Linear(hidden, kv, bias=a.qkv_bias)
        self.o_proj = nn.Linear(q, hidden, bias=a.o_bias)
        self.qk_norm, self.scale = a.qk_norm, a.attention_scale
        if self.qk_norm:
            self.q_norm, self.k_norm = RMSNorm(a.head_dim, a), RMSNorm(a.head_dim, a)

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        hd, kinds = self.head_dim, (self.num_heads, self.num_kv_heads, self.num_kv_heads)
        if self.fused:
            pieces = [heads * hd for heads in kinds]
            q, k, v = _colwise(x, self.qkv_proj, pieces, hd, "attention")
        else:
            projs = (self.q_proj, self.k_proj, self.v_proj)
            q, k, v = (_colwise(x, p, None, hd, "attention") for p in projs)
        b, s = x.shape[:2]
        return tuple(hints.view(y, [b, s, h, hd], 2) for y, h in zip((q, k, v), kinds, strict=True))

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        b, s = x.shape[:2]
        q, k, v = self._qkv(x)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=self.scale, enable_gqa=True
        )
        out = hints.view(out.transpose(1, 2), [b, s, self.num_heads * self.head_dim], 2)
        o = self.o_proj
        out = hints.linear(out, o.weight, o.bias, "rowwise", None, self.head_dim, "attention")
        return hints.all_reduce(out)

    def local_shapes(self, dc: DistConfig) -> Shapes:
        hidden, hd, tp = self.o_proj.out_features, self.head_dim, dc.tp_size
        q_rows = split_size(self.num_heads, tp) * hd
        kv_rows = split_size(self.num_kv_heads, tp) * hd
        if self.fused:
            rows = {"qkv_proj": q_rows + 2 * kv_rows}
        else:
            rows = {"q_proj": q_rows, "k_proj": kv_rows, "v_proj": kv_rows}
        shapes: Shapes = {"o_proj.weight": (hidden, q_rows)}
        for name, n in rows.items():
            shapes[f"{name}.weight"] = (n, hidden)
            if getattr(self, name).bias is not None:
                shapes[f"{name}.bias"] = (n,)
        return shapes  # a rowwise bias (o_proj's) keeps its full shape


class MLP(nn.Module):
    """Gated MLP (SwiGLU with ``activation="silu"``): gate/up colwise (one fused weight or two),
    down rowwise, then one all-reduce unless ``reduce=False`` (a shared expert, reduced together
    with the routed experts)."""

    def __init__(
        self,
        hidden: int,
        intermediate: int,
        *,
        activation: str,
        bias=False,
        fused=False,
        reduce=True,
    ) -> None:
        super().__init__()
        self.fused, self.intermediate = fused, intermediate
        self.act_fn = hints.activation(activation)
        if fused:
            self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, bias=bias)
        else:
            self.gate_proj = nn.Linear(hidden, intermediate, bias=bias)
            self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        self.collectives = int(reduce)

    @classmethod
    def dense(cls, a: Arch) -> MLP:
        return cls(
            a.hidden_size,
            a.intermediate_size,
            activation=a.activation,
            bias=a.mlp_bias,
            fused=a.fused_gate_up,
        )

    def forward(self, x: Tensor) -> Tensor:
        if self.fused:
            gate, up = _colwise(x, self.gate_up_proj, [self.intermediate] * 2)
        else:
            gate, up = _colwise(x, self.gate_proj, None), _colwise(x, self.up_proj, None)
        d = self.down_proj
        down = hints.linear(self.act_fn(gate) * up, d.weight, d.bias, "rowwise")
        return hints.all_reduce(down) if self.collectives else down

    def local_shapes(self, dc: DistConfig) -> Shapes:
        return self.shapes_over(dc.tp_size)

    def shapes_over(self, parts: int) -> Shapes:
        """Local shapes with gate/up split colwise and down rowwise over ``parts`` ranks."""
        hidden, inter = self.down_proj.out_features, split_size(self.intermediate, parts)
        rows = {"gate_up_proj": 2 * inter} if self.fused else {"gate_proj": inter, "up_proj": inter}
        shapes: Shapes = {"down_proj.weight": (hidden, inter)}
        for name, n in rows.items():
            shapes[f"{name}.weight"] = (n, hidden)
            if getattr(self, name).bias is not None:
                shapes[f"{name}.bias"] = (n,)
        return shapes
