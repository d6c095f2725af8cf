"""Per-expert checkpoint keys <-> transformers' fused in-memory expert tensors, both ways."""

from __future__ import annotations

import torch

from stagebot.harness.suites.sharding_ir.blocks.moe import fuse_experts, unfuse_experts

E, INTER, HIDDEN = 3, 2, 4
BLOCK = "model.layers.1.mlp.experts"


def _per_expert() -> dict[str, torch.Tensor]:
    state = {"model.layers.1.mlp.gate.weight": torch.randn(E, HIDDEN)}
    for e in range(E):
        state[f"{BLOCK}.{e}.gate_proj.weight"] = torch.full((INTER, HIDDEN), 10.0 * e + 1)
        state[f"{BLOCK}.{e}.up_proj.weight"] = torch.full((INTER, HIDDEN), 10.0 * e + 2)
        state[f"{BLOCK}.{e}.down_proj.weight"] = torch.full((HIDDEN, INTER), 10.0 * e + 3)
    return state


def test_fuse_puts_gate_rows_first_then_up():
    fused = fuse_experts(_per_expert())
    assert set(fused) == {
        "model.layers.1.mlp.gate.weight",
        f"{BLOCK}.gate_up_proj",
        f"{BLOCK}.down_proj",
    }
    gate_up, down = fused[f"{BLOCK}.gate_up_proj"], fused[f"{BLOCK}.down_proj"]
    assert gate_up.shape == (E, 2 * INTER, HIDDEN) and down.shape == (E, HIDDEN, INTER)
    for e in range(E):
        assert (gate_up[e, :INTER] == 10 * e + 1).all() and (gate_up[e, INTER:] == 10 * e + 2).all()
        assert (down[e] == 10 * e + 3).all()


def test_unfuse_inverts_fuse_both_ways():
    per_expert = _per_expert()
    back = unfuse_experts(fuse_experts(per_expert))
    assert back.keys() == per_expert.keys()
    assert all(torch.equal(back[k], per_expert[k]) for k in per_expert)
    fused = {
        f"{BLOCK}.gate_up_proj": torch.randn(E, 2 * INTER, HIDDEN),
        f"{BLOCK}.down_proj": torch.randn(E, HIDDEN, INTER),
    }
    again = fuse_experts(unfuse_experts(fused))
    assert again.keys() == fused.keys() and all(torch.equal(again[k], fused[k]) for k in fused)
