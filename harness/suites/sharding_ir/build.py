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
    model = IRForCausalLM(config, spec.arch, fixed_routing=fixed_routing)
    reinit_(model)
    return model.eval()


@torch.no_grad()
def reinit_(model: nn.Module, seed: int = SEED) -> None:
    """Refill every parameter from one CPU generator, in fp32, then cast.

    Matrices get std fan_in^-0.5 (activations stay O(1), so a dropped collective shows), norm
    weights 1 + 0.1 N, other vectors 0.1 N, unless their module's ``init_std`` (parameter name
    -> std) gives the scale a block needs (sink logits of order one). Buffers stay as the model
    computed them from the config (RoPE's ``inv_freq``): HF's class computes its own, so a wrong
    one fails the check against HF.
    """
    gen = torch.Generator().manual_seed(seed)
    stds = {
        f"{prefix}.{name}" if prefix else name: std
        for prefix, module in model.named_modules()
        for name, std in getattr(module, "init_std", {}).items()
    }
    for name, t in model.named_parameters():
        if not t.is_floating_point():
            continue
        noise = torch.randn(t.shape, generator=gen, dtype=torch.float32)
        if name in stds:
            value = noise * stds[name]
        elif t.dim() >= 2:
            value = noise * t.shape[-1] ** -0.5
        elif "norm" in name:
            value = 1.0 + 0.1 * noise
        else:
            value = 0.1 * noise
        t.copy_(value.to(t.dtype))


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
