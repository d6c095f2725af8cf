"""The gated MLP block (``gated_mlp``; SwiGLU with activation ``silu``): gate/up colwise (one
fused ``gate_up_proj`` weight with ``fused=True``, gate rows first, or two), down rowwise, then one
summing all-reduce. Parameters: ``bias``, ``fused``; the activation is the family's."""

from __future__ import annotations

from torch import Tensor, nn

from stagebot.harness.suites.sharding_ir import blocks, hints
from stagebot.harness.suites.sharding_ir.blocks._parts import Shapes, colwise, split_size
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.family import Arch


class MLP(nn.Module):
    """``reduce=False``: no all-reduce of its own (an expert, reduced with the others)."""

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
        self.collectives = {"sum": 1} if reduce else {}

    def forward(self, x: Tensor) -> Tensor:
        if self.fused:
            gate, up = colwise(x, self.gate_up_proj, [self.intermediate] * 2)
        else:
            gate, up = colwise(x, self.gate_proj, None), colwise(x, self.up_proj, None)
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


@blocks.register("ffn", "gated_mlp")
def gated_mlp(a: Arch, layer: int, *, bias: bool = False, fused: bool = False) -> MLP:
    return MLP(a.hidden_size, a.intermediate_size, activation=a.activation, bias=bias, fused=fused)
