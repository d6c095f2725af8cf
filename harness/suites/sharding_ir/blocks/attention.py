"""The attention block (``attention``): q/k/v colwise by heads (KV heads replicated when fewer
than TP ranks), o_proj rowwise, one summing all-reduce; softmax by SDPA.

Parameters: ``qk_norm`` (``none``; ``head``: one norm of ``head_dim`` per head, Qwen3's;
``projection``: a norm over the whole q and k projections, OLMo2's, which TP splits: the norm
block's ``across_ranks`` form, its statistic averaged over the ranks and its weight following the
projection's rows; ``per_head``: each head its own norm weight of ``head_dim``, Cohere's, a
[heads, head_dim] weight whose rows follow the projection's heads under TP), ``bias`` (q/k/v) and
``o_bias``, ``fused_qkv`` (one ``qkv_proj`` weight), ``scale`` (the softmax scale; None:
``head_dim ** -0.5``) and ``o_name`` (the output projection's module name: ``o_proj``, Phi's
``dense``). With ``reduce=False`` (from a layer block that reduces two branches at once) the
block leaves its output a partial sum.

RoPE rotates each head's first ``Arch.rotary_dim`` dims (all of them unless the family declares a
rotary fraction), halves rotated against each other (``rotate_half``, HF's default layout). A
variant is a subclass overriding one method: the softmax itself ``core`` (``softcap_attention``),
the rotation ``rotate`` (``interleaved_rope_attention``: pairs of adjacent dims), whether a layer
rotates at all ``rope`` (``sink_attention``'s layers without RoPE).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stagebot.harness.suites.sharding_ir import blocks, hints
from stagebot.harness.suites.sharding_ir.blocks._parts import Shapes, colwise, split_size
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.errors import ShardingIRError
from stagebot.harness.suites.sharding_ir.family import Arch

QK_NORMS = ("none", "head", "projection", "per_head")


class Attention(nn.Module):
    def __init__(
        self,
        a: Arch,
        *,
        qk_norm: str = "none",
        bias: bool = False,
        o_bias: bool = False,
        fused_qkv: bool = False,
        scale: float | None = None,
        o_name: str = "o_proj",
        reduce: bool = True,
    ) -> None:
        super().__init__()
        if qk_norm not in QK_NORMS:
            raise ShardingIRError(
                f"attention: unknown qk_norm {qk_norm!r}; the family's spec names one of "
                f"{', '.join(QK_NORMS)}."
            )
        self.num_heads, self.num_kv_heads, self.head_dim = a.num_heads, a.num_kv_heads, a.head_dim
        hidden, q, kv = a.hidden_size, a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
        self.fused = fused_qkv
        if fused_qkv:
            self.qkv_proj = nn.Linear(hidden, q + 2 * kv, bias=bias)
        else:
            self.q_proj = nn.Linear(hidden, q, bias=bias)
            self.k_proj = nn.Linear(hidden, kv, bias=bias)
            self.v_proj = nn.Linear(hidden, kv, bias=bias)
        self.o_name, self.rotary_dim = o_name, a.rotary_dim
        self.add_module(o_name, nn.Linear(q, hidden, bias=o_bias))
        self.collectives = {"sum": 1} if reduce else {}
        self.qk_norm = qk_norm
        self.scale = a.head_dim**-0.5 if scale is None else scale
        if qk_norm == "head":
            self.q_norm = blocks.build("norm", a.norm, a, a.head_dim)
            self.k_norm = blocks.build("norm", a.norm, a, a.head_dim)
        elif qk_norm != "none" and fused_qkv:  # the norm's weight follows q_proj's rows
            raise ShardingIRError(f"attention: a {qk_norm} q/k norm needs separate q/k/v.")
        elif qk_norm == "projection":
            self.q_norm = blocks.build("norm", a.norm, a, q, across_ranks=True)
            self.k_norm = blocks.build("norm", a.norm, a, kv, across_ranks=True)
        elif qk_norm == "per_head":
            self.q_norm = blocks.build("norm", a.norm, a, (a.num_heads, a.head_dim))
            self.k_norm = blocks.build("norm", a.norm, a, (a.num_kv_heads, a.head_dim))
        if qk_norm in ("projection", "per_head"):
            self.follows = {"q_norm.weight": "q_proj.weight", "k_norm.weight": "k_proj.weight"}

    def _qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        hd, kinds = self.head_dim, (self.num_heads, self.num_kv_heads, self.num_kv_heads)
        if self.fused:
            pieces = [heads * hd for heads in kinds]
            q, k, v = colwise(x, self.qkv_proj, pieces, hd, "attention")
        else:
            projs = (self.q_proj, self.k_proj, self.v_proj)
            q, k, v = (colwise(x, p, None, hd, "attention") for p in projs)
        if self.qk_norm == "projection":
            q = self.q_norm(q, follows=self.q_proj.weight)
            k = self.k_norm(k, follows=self.k_proj.weight)
        b, s = x.shape[:2]
        q, k, v = (hints.view(y, [b, s, h, hd], 2) for y, h in zip((q, k, v), kinds, strict=True))
        if self.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        elif self.qk_norm == "per_head":
            q = self.q_norm(q, follows=self.q_proj.weight)
            k = self.k_norm(k, follows=self.k_proj.weight)
        return q, k, v

    def core(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Causal softmax attention of [batch, heads, seq, head_dim] tensors (fewer KV heads)."""
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=self.scale, enable_gqa=True
        )

    def rotate(self, x: Tensor) -> Tensor:
        """The rotation RoPE's sines multiply: halves against each other (HF's default)."""
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """RoPE over the first ``rotary_dim`` dims of [batch, heads, seq, head_dim] heads."""
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        if self.rotary_dim == self.head_dim:
            return x * cos + self.rotate(x) * sin
        turned, kept = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        return torch.cat((turned * cos + self.rotate(turned) * sin, kept), dim=-1)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        b, s = x.shape[:2]
        q, k, v = (t.transpose(1, 2) for t in self._qkv(x))
        out = self.core(self.rope(q, cos, sin), self.rope(k, cos, sin), v)
        out = hints.view(out.transpose(1, 2), [b, s, self.num_heads * self.head_dim], 2)
        o = self.get_submodule(self.o_name)
        out = hints.linear(out, o.weight, o.bias, "rowwise", None, self.head_dim, "attention")
        return hints.all_reduce(out) if self.collectives else out

    def local_shapes(self, dc: DistConfig) -> Shapes:
        o = self.get_submodule(self.o_name)
        hidden, hd, tp = o.out_features, self.head_dim, dc.tp_size
        q_rows = split_size(self.num_heads, tp) * hd
        kv_rows = split_size(self.num_kv_heads, tp) * hd
        if self.fused:
            rows = {"qkv_proj": q_rows + 2 * kv_rows}
        else:
            rows = {"q_proj": q_rows, "k_proj": kv_rows, "v_proj": kv_rows}
        shapes: Shapes = {f"{self.o_name}.weight": (hidden, q_rows)}
        for name, n in rows.items():
            shapes[f"{name}.weight"] = (n, hidden)
            if getattr(self, name).bias is not None:
                shapes[f"{name}.bias"] = (n,)
        if self.qk_norm == "projection":
            shapes |= {"q_norm.weight": (q_rows,), "k_norm.weight": (kv_rows,)}
        elif self.qk_norm == "per_head":
            shapes |= {"q_norm.weight": (q_rows // hd, hd), "k_norm.weight": (kv_rows // hd, hd)}
        return shapes  # a rowwise bias (o_proj's) keeps its full shape; head_dim norms too


@blocks.register("attention", "attention")
def attention(
    a: Arch,
    layer: int,
    *,
    qk_norm: str = "none",
    bias: bool = False,
    o_bias: bool = False,
    fused_qkv: bool = False,
    scale: float | None = None,
    o_name: str = "o_proj",
    reduce: bool = True,
) -> Attention:
    return Attention(
        a,
        qk_norm=qk_norm,
        bias=bias,
        o_bias=o_bias,
        fused_qkv=fused_qkv,
        scale=scale,
        o_name=o_name,
        reduce=reduce,
    )
