"""The sparse MoE block (``sparse_moe``): a softmax top-k router, routed gated-MLP experts through
the ``moe`` hint (the family's activation), optionally a shared expert (sigmoid-gated, as
Qwen2-MoE), and one summing all-reduce for both (none with ``reduce=False``: a layer block
reducing it with another branch).

Parameters: ``num_experts``, ``top_k``, ``intermediate_size`` (an expert's), ``norm_topk_prob``
(renormalise the top-k weights to sum to 1), ``shared_intermediate_size`` (None: no shared
expert), ``dense_layers`` (layer indices that keep the dense MLP), ``sparse_step`` (only every
n-th layer is sparse), ``router`` (the router's module name, ``gate``) and, as for every
feed-forward block, ``module`` (the layer's attribute holding it, ``mlp``).

Parameters carry the checkpoint names (``mlp.experts.<e>.gate_proj.weight`` ...). transformers
5.x keeps each layer's experts fused in memory (``mlp.experts.gate_up_proj`` [E, 2I, H], gate
rows first; ``mlp.experts.down_proj`` [E, H, I]): ``fuse_experts`` / ``unfuse_experts`` map
between the two layouts, once, for whole state dicts.
"""

from __future__ import annotations

import re
from collections import defaultdict

import torch
from torch import Tensor, nn

from stagebot.harness.suites.sharding_ir import blocks, hints
from stagebot.harness.suites.sharding_ir.blocks._parts import Shapes
from stagebot.harness.suites.sharding_ir.blocks.mlp import MLP
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.family import Arch

_EXPERT_KEY = re.compile(
    r"^(?P<block>.*\.experts)\.(?P<e>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$"
)
_FUSED_KEY = re.compile(r"^(?P<block>.*\.experts)\.(?P<proj>gate_up_proj|down_proj)$")


class SparseMoeBlock(nn.Module):
    """Softmax top-k router (HF's) or, with ``fixed_routing``, experts chosen by token index.

    The routed experts are split over EP x MoE-TP; a shared expert over all TP ranks like a
    dense MLP. Both are partial sums until the block's one all-reduce."""

    def __init__(
        self,
        a: Arch,
        *,
        num_experts: int,
        top_k: int,
        intermediate_size: int,
        norm_topk_prob: bool,
        shared_intermediate_size: int | None,
        router: str,
        reduce: bool,
    ) -> None:
        super().__init__()
        self.collectives = {"sum": 1} if reduce else {}
        self.num_experts, self.top_k, self.norm_topk_prob = num_experts, top_k, norm_topk_prob
        self.fixed_routing, self.activation = a.fixed_routing, a.activation
        self.router_name = router
        self.add_module(router, nn.Linear(a.hidden_size, num_experts, bias=False))
        expert = dict(activation=a.activation, reduce=False)
        self.experts = nn.ModuleList(
            MLP(a.hidden_size, intermediate_size, **expert) for _ in range(num_experts)
        )
        self.has_shared_expert = shared_intermediate_size is not None
        if self.has_shared_expert:
            self.shared_expert = MLP(a.hidden_size, shared_intermediate_size, **expert)
            self.shared_expert_gate = nn.Linear(a.hidden_size, 1, bias=False)

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        router = self.get_submodule(self.router_name)
        probs = torch.softmax(router(x), dim=-1, dtype=torch.float)
        if self.fixed_routing:
            tokens = torch.arange(x.shape[0], device=x.device)[:, None]
            ids = (
                tokens * self.top_k + torch.arange(self.top_k, device=x.device)
            ) % self.num_experts
            weights = probs.gather(1, ids)
        else:
            weights, ids = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return ids, weights.to(x.dtype)

    def forward(self, x: Tensor) -> Tensor:
        b, s, h = x.shape
        flat = x.reshape(-1, h)
        ids, weights = self.route(flat)
        out = hints.moe(
            flat,
            ids,
            weights,
            [e.gate_proj.weight for e in self.experts],
            [e.down_proj.weight for e in self.experts],
            [e.up_proj.weight for e in self.experts],
            self.activation,
        )
        if self.has_shared_expert:
            out = out + torch.sigmoid(self.shared_expert_gate(flat)) * self.shared_expert(flat)
        return (hints.all_reduce(out) if self.collectives else out).reshape(b, s, h)

    def local_shapes(self, dc: DistConfig) -> Shapes:
        local = expected_local_experts(self.num_experts, dc.moe_ep, dc.moe_ep_rank)
        shapes: Shapes = {}
        for e, expert in enumerate(self.experts):
            for name, shape in expert.shapes_over(dc.moe_tp).items():
                shapes[f"experts.{e}.{name}"] = shape if e in local else None
        if self.has_shared_expert:
            shared = self.shared_expert.shapes_over(dc.tp_size).items()
            shapes |= {f"shared_expert.{name}": shape for name, shape in shared}
        return shapes


@blocks.register("ffn", "sparse_moe")
def sparse_moe(
    a: Arch,
    layer: int,
    *,
    num_experts: int,
    top_k: int,
    intermediate_size: int,
    norm_topk_prob: bool,
    shared_intermediate_size: int | None = None,
    dense_layers: list[int] | None = None,
    sparse_step: int = 1,
    router: str = "gate",
    reduce: bool = True,
) -> SparseMoeBlock | None:
    """The block for ``layer``, or None where the layer keeps the dense MLP."""
    if num_experts == 0 or layer in (dense_layers or ()) or (layer + 1) % sparse_step:
        return None
    return SparseMoeBlock(
        a,
        num_experts=num_experts,
        top_k=top_k,
        intermediate_size=intermediate_size,
        norm_topk_prob=bool(norm_topk_prob),
        shared_intermediate_size=shared_intermediate_size,
        router=router,
        reduce=reduce,
    )


def expected_local_experts(num_experts: int, moe_ep: int, ep_rank: int) -> range:
    """The experts EP rank ``ep_rank`` should keep, written out here on purpose rather than taken
    from ``DistConfig.local_experts`` (which the sharder uses): an even share each, the
    remainder on the last EP rank."""
    share = num_experts // moe_ep
    start = ep_rank * share
    stop = num_experts if ep_rank == moe_ep - 1 else start + share
    return range(start, stop)


def fuse_experts(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Per-expert checkpoint keys -> HF's fused ``gate_up_proj`` / ``down_proj`` per block."""
    out: dict[str, Tensor] = {}
    blocks: dict[str, dict[int, dict[str, Tensor]]] = defaultdict(lambda: defaultdict(dict))
    for key, value in state.items():
        m = _EXPERT_KEY.match(key)
        if m:
            blocks[m["block"]][int(m["e"])][m["proj"]] = value
        else:
            out[key] = value
    for block, experts in blocks.items():
        order = [experts[e] for e in sorted(experts)]
        if sorted(experts) != list(range(len(experts))):
            raise ValueError(f"{block}: expert ids {sorted(experts)} are not 0..{len(experts) - 1}")
        out[f"{block}.gate_up_proj"] = torch.stack(
            [torch.cat((p["gate_proj"], p["up_proj"])) for p in order]
        )
        out[f"{block}.down_proj"] = torch.stack([p["down_proj"] for p in order])
    return out


def unfuse_experts(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """HF's fused expert tensors -> the per-expert checkpoint keys (inverse of ``fuse_experts``)."""
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        m = _FUSED_KEY.match(key)
        if not m:
            out[key] = value
            continue
        for e, tensor in enumerate(value.unbind(0)):
            prefix = f"{m['block']}.{e}"
            if m["proj"] == "down_proj":
                out[f"{prefix}.down_proj.weight"] = tensor
            else:
                gate, up = tensor.chunk(2, dim=0)
                out[f"{prefix}.gate_proj.weight"], out[f"{prefix}.up_proj.weight"] = gate, up
    return out
