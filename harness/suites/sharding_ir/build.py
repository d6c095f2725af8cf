"""Tiny deterministic models and inputs: the same bits on every rank, no files, no downloads."""

from __future__ import annotations

import torch
from torch import fx, nn

from stagebot.harness.suites.sharding_ir.models.decoder import IRForCausalLM
from stagebot.harness.suites.sharding_ir.registry import ModelSpec

SEED = 0


def build_ir_model(
    spec: ModelSpec, overrides: dict | None = None, *, fixed_routing: bool = False
) -> nn.Module:
    """The IR model for ``spec``'s tiny config, re-initialised from the seed (fp32, CPU)."""
    config = spec.config(**(overrides or {}))
    model = IRForCausalLM(config, spec.arch, fixed_routing=fixed_routing, entry=spec.model_id)
    reinit_(model)
    return model.eval()


BIAS_STD, VECTOR_STD = 0.1, 0.1  # small beside the O(1) activations a projection's rows give


def init_of(module: nn.Module, attr: str, param: torch.Tensor) -> tuple[float, float]:
    """(mean, std) a parameter is drawn at, by its role: what its module's ``init`` states (a
    norm's scale around its identity, sink logits of order one), else a bias small, a matrix
    (a projection's or embedding's weight) at std fan_in^-0.5 so activations stay O(1) and a
    dropped collective shows, any other vector small."""
    if attr in getattr(module, "init", {}):
        return module.init[attr]
    if attr == "bias":
        return 0.0, BIAS_STD
    if param.dim() >= 2:
        return 0.0, param.shape[-1] ** -0.5
    return 0.0, VECTOR_STD


@torch.no_grad()
def reinit_(model: nn.Module, seed: int = SEED) -> None:
    """Refill every parameter from one CPU generator, in fp32, by its role (``init_of``), then
    cast. Buffers stay as the model computed them from the config (RoPE's ``inv_freq``): HF's
    class computes its own, so a wrong one fails the check against HF."""
    gen = torch.Generator().manual_seed(seed)
    for name, t in model.named_parameters():
        if not t.is_floating_point():
            continue
        owner, _, attr = name.rpartition(".")
        mean, std = init_of(model.get_submodule(owner), attr, t)
        noise = torch.randn(t.shape, generator=gen, dtype=torch.float32)
        t.copy_((mean + std * noise).to(t.dtype))


def prefill_inputs(
    vocab_size: int, batch: int = 2, seq: int = 128, seed: int = SEED
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids [batch, seq] from a seeded generator and positions 0..seq-1. The default,
    the sharded checks' (256 tokens, every expert routed to by index; longer than any tiny
    sliding window), is a quarter of the reference design's 4 x 256: every eager forward of a
    case (the reference, the sharded one, each control's) costs in proportion."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (batch, seq), generator=gen)
    return ids, torch.arange(seq).expand(batch, seq).contiguous()


def poison_(gm: fx.GraphModule) -> None:
    """Fill every parameter with NaN, so only a working load can make the outputs right again."""
    with torch.no_grad():
        for param in gm.parameters():
            param.fill_(float("nan"))
