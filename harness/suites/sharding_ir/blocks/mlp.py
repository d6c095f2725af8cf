"""The feed-forward blocks: gate/up (or up alone) colwise, down rowwise, then one summing
all-reduce (none with ``reduce=False``: a layer block reducing two branches at once, or an
expert reduced with the others).

- ``gated_mlp`` (SwiGLU with activation ``silu``): ``down(act(gate(x)) * up(x))``; one fused
  ``gate_up_proj`` weight with ``fused=True`` (gate rows first), or two. Parameters: ``bias``,
  ``fused``.
- ``mlp`` (GPT-2's, Phi's, Starcoder2's): ``down(act(up(x)))``. Parameters: ``bias``, ``up`` and
  ``down`` (the projections' module names: Phi's ``fc1``/``fc2``, Starcoder2's ``c_fc``/``c_proj``).

The activation is the family's.
"""

from __future__ import annotations

from torch import Tensor, nn

from stagebot.harness.suites.sharding_ir import blocks, hints
from stagebot.harness.suites.sharding_ir.blocks._parts import Shapes, colwise, split_size
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.family import Arch


class _FeedForward(nn.Module):
    """What both share: the down projection (added after the colwise ones, in HF's order), the
    reduction, the local shapes."""

    def __init__(self, intermediate: int, reduce: bool):
        super().__init__()
        self.intermediate = intermediate
        self.collectives = {"sum": 1} if reduce else {}

    def add_down(self, name: str, hidden: int, bias: bool) -> None:
        self.down_name = name
        self.add_module(name, nn.Linear(self.intermediate, hidden, bias=bias))

    def colwise_rows(self) -> dict[str, int]:
        """Colwise projection name -> its rows over the intermediate size (unsharded)."""
        raise NotImplementedError

    def down(self, h: Tensor) -> Tensor:
        d = self.get_submodule(self.down_name)
        out = hints.linear(h, d.weight, d.bias, "rowwise")
        return hints.all_reduce(out) if self.collectives else out

    def local_shapes(self, dc: DistConfig) -> Shapes:
        return self.shapes_over(dc.tp_size)

    def shapes_over(self, parts: int) -> Shapes:
        """Local shapes with the colwise projections split over ``parts`` ranks, down rowwise."""
        hidden = self.get_submodule(self.down_name).out_features
        inter = split_size(self.intermediate, parts)
        shapes: Shapes = {f"{self.down_name}.weight": (hidden, inter)}
        for name, n in self.colwise_rows().items():
            rows = n // self.intermediate * inter
            shapes[f"{name}.weight"] = (rows, hidden)
            if self.get_submodule(name).bias is not None:
                shapes[f"{name}.bias"] = (rows,)
        return shapes  # down's bias keeps its full shape (on TP rank 0; zero elsewhere)


class MLP(_FeedForward):
    """The gated MLP. ``reduce=False``: no all-reduce of its own."""

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
        super().__init__(intermediate, reduce)
        self.fused = fused
        self.act_fn = hints.activation(activation)
        if fused:
            self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, bias=bias)
        else:
            self.gate_proj = nn.Linear(hidden, intermediate, bias=bias)
            self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.add_down("down_proj", hidden, bias)

    def colwise_rows(self) -> dict[str, int]:
        n = self.intermediate
        return {"gate_up_proj": 2 * n} if self.fused else {"gate_proj": n, "up_proj": n}

    def forward(self, x: Tensor) -> Tensor:
        if self.fused:
            gate, up = colwise(x, self.gate_up_proj, [self.intermediate] * 2)
        else:
            gate, up = colwise(x, self.gate_proj, None), colwise(x, self.up_proj, None)
        return self.down(self.act_fn(gate) * up)


class PlainMLP(_FeedForward):
    def __init__(self, a: Arch, *, bias: bool, up: str, down: str, reduce: bool) -> None:
        super().__init__(a.intermediate_size, reduce)
        self.up_name = up
        self.add_module(up, nn.Linear(a.hidden_size, a.intermediate_size, bias=bias))
        self.add_down(down, a.hidden_size, bias)
        self.act_fn = hints.activation(a.activation)

    def colwise_rows(self) -> dict[str, int]:
        return {self.up_name: self.intermediate}

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.act_fn(colwise(x, self.get_submodule(self.up_name), None)))


@blocks.register("ffn", "gated_mlp")
def gated_mlp(
    a: Arch, layer: int, *, bias: bool = False, fused: bool = False, reduce: bool = True
) -> MLP:
    return MLP(
        a.hidden_size,
        a.intermediate_size,
        activation=a.activation,
        bias=bias,
        fused=fused,
        reduce=reduce,
    )


@blocks.register("ffn", "mlp")
def mlp(
    a: Arch,
    layer: int,
    *,
    bias: bool = False,
    up: str = "up_proj",
    down: str = "down_proj",
    reduce: bool = True,
) -> PlainMLP:
    return PlainMLP(a, bias=bias, up=up, down=down, reduce=reduce)
