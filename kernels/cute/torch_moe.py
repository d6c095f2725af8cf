"""The MoE layer as users compose it in torch today, the peers of the NVFP4 kernels.

Routing (softmax top-k, renormalised), a sort of the (token, k) pairs by expert, a gather of the
token rows, a grouped GEMM (``torch._grouped_mm`` in bf16, or ``torch._scaled_grouped_mm`` in fp8
e4m3 with rowwise scales), SwiGLU, the second grouped GEMM, then the router weights applied and
the rows added into their tokens (``index_add_``). Sizes are the static maxima (T * top_k rows)
and nothing synchronises the host, so a layer replays from a CUDA graph, as the kernels' does.
Also the float32 layer that every composition is checked against (``dense_moe``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from stagebot.kernels.reference import highest_fp32_matmul

FP8_MAX = 448.0  # largest e4m3 value
GroupedGemm = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (rows, offs) -> bf16 rows


def route(x: torch.Tensor, router: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(experts int32 [T, top_k], weights fp32 [T, top_k] summing to 1): the top_k of the
    softmax over ``x @ router`` ([H, E]), renormalised."""
    probs = torch.softmax((x @ router).float(), dim=-1)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    return experts.int(), weights / weights.sum(dim=-1, keepdim=True)


def swiglu(h: torch.Tensor) -> torch.Tensor:
    """[rows, 2I] as [linear | gate] -> linear * silu(gate) [rows, I]."""
    linear, gate = h.chunk(2, dim=-1)
    return linear * torch.nn.functional.silu(gate)


def fp8_rowwise(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """t [..., K] -> (e4m3 [..., K], fp32 scale [...]) with t ~ codes * scale, one scale a row."""
    scale = t.abs().amax(dim=-1).float().clamp_min(1e-12) / FP8_MAX
    return (t.float() / scale.unsqueeze(-1)).to(torch.float8_e4m3fn), scale


def bf16_gemm(w: torch.Tensor) -> GroupedGemm:
    """rows @ w[e]^T per group, w [experts, n, K] bf16."""
    wt = w.transpose(-2, -1)
    return lambda rows, offs: torch._grouped_mm(rows, wt, offs=offs, out_dtype=torch.bfloat16)


def fp8_gemm(w: torch.Tensor) -> GroupedGemm:
    """The same in fp8: w quantised once per (expert, n), the rows per call, per row."""
    codes, w_scale = fp8_rowwise(w)
    wt = codes.transpose(-2, -1)

    def gemm(rows: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        a, a_scale = fp8_rowwise(rows)
        return torch._scaled_grouped_mm(
            a, wt, a_scale, w_scale, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True
        )

    return gemm


def unpermute_reduce(
    rows: torch.Tensor,
    token: torch.Tensor,
    row_weight: torch.Tensor,
    num_tokens: int,
    num_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """bf16 [num_tokens, n]: each row times its router weight, added into its token. Rows at or
    past ``num_valid`` (a 0-dim tensor; None: none) hold anything and are left out."""
    weighted = rows * row_weight.unsqueeze(-1).to(rows.dtype)
    if num_valid is not None:
        keep = torch.arange(rows.shape[0], device=rows.device) < num_valid
        weighted = torch.where(keep.unsqueeze(-1), weighted, 0)
    out = torch.zeros(num_tokens, rows.shape[1], dtype=rows.dtype, device=rows.device)
    return out.index_add_(0, token, weighted)


def grouped_moe(
    x: torch.Tensor,
    experts: torch.Tensor,
    weights: torch.Tensor,
    num_local: int,
    gemm1: GroupedGemm,
    gemm2: GroupedGemm,
) -> torch.Tensor:
    """bf16 [T, H] over the local experts 0 .. num_local - 1 (other experts' pairs add nothing).
    gemm1 maps token rows to [linear | gate] rows, gemm2 SwiGLU rows to hidden rows."""
    num_tokens, top_k = experts.shape
    key = experts.reshape(-1).long().clamp(max=num_local)  # other experts sort last
    order = torch.argsort(key, stable=True)
    counts = torch.zeros(num_local + 1, dtype=torch.long, device=x.device)
    counts.scatter_add_(0, key, torch.ones_like(key))
    offs = counts[:num_local].cumsum(0).int()
    token = order // top_k
    y = gemm2(swiglu(gemm1(x[token], offs)), offs)
    return unpermute_reduce(y, token, weights.reshape(-1)[order], num_tokens, offs[-1])


def dense_moe(
    x: torch.Tensor,
    experts: torch.Tensor,
    weights: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
) -> torch.Tensor:
    """float32 [T, H], the reference: every local expert's rows in float32 (no TF32), w1
    [l, 2I, H] as [linear; gate] rows, w2 [l, H, I]."""
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    with highest_fp32_matmul():
        for e in range(w1.shape[0]):
            token, slot = (experts == e).nonzero(as_tuple=True)
            h = swiglu(x[token].float() @ w1[e].float().T)
            out.index_add_(0, token, (h @ w2[e].float().T) * weights[token, slot].unsqueeze(-1))
    return out
