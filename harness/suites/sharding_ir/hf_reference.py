"""The IR model against HF's own class of the family, on the same config and weights (fp32, CPU,
one process, HF's router): without it a wrong IR would still pass "sharded == unsharded"."""

from __future__ import annotations

import torch
from torch import nn

from stagebot.harness.suites.sharding_ir.blocks.moe import fuse_experts
from stagebot.harness.suites.sharding_ir.build import build_ir_model, prefill_inputs
from stagebot.harness.suites.sharding_ir.checks import CheckResult
from stagebot.harness.suites.sharding_ir.registry import ModelSpec

TOLERANCE = 1e-5  # rtol and atol: both sides compute in fp32


class LayoutMismatch(ValueError):
    """The IR's parameters are not the HF class's: a different architecture."""


def build_hf_model(spec: ModelSpec, ir_model: nn.Module) -> nn.Module:
    """HF's own class on the IR model's config, carrying the IR model's weights; its buffers (RoPE's
    frequencies) are its own, computed from the config, as the IR's are."""
    hf = spec.hf_model_class()(ir_model.config).eval()
    missing, unexpected = hf.load_state_dict(
        fuse_experts(ir_model.state_dict()),
        strict=False,  # HF's in-memory expert layout
    )
    if missing or unexpected:
        raise LayoutMismatch(
            f"{len(missing)} of HF's parameters missing from the IR (e.g. {missing[:2]}), "
            f"{len(unexpected)} of the IR's unknown to HF (e.g. {unexpected[:2]})"
        )
    return hf


@torch.no_grad()
def ir_and_hf_logits(spec: ModelSpec, overrides: dict, batch: int = 2, seq: int = 64):
    ir = build_ir_model(spec, overrides)
    hf = build_hf_model(spec, ir)
    ids, pos = prefill_inputs(ir.arch.vocab_size, batch=batch, seq=seq)
    return ir(ids, pos), hf(input_ids=ids, position_ids=pos, use_cache=False).logits


_CHECKED: dict[str, CheckResult] = {}  # repr((spec, overrides)) -> its result, in this process


def matches_hf_check(spec: ModelSpec, overrides: dict) -> CheckResult:
    """IR logits vs HF's on the same weights; a layout HF cannot load fails too. Once per spec and
    overrides in a process: the IR-vs-HF unit tests and every dist config's case share it."""
    key = repr((spec, sorted(overrides.items())))
    if key not in _CHECKED:
        _CHECKED[key] = _matches_hf(spec, overrides)
    return _CHECKED[key]


def _matches_hf(spec: ModelSpec, overrides: dict) -> CheckResult:
    try:
        ir, hf = ir_and_hf_logits(spec, overrides)
    except (LayoutMismatch, RuntimeError) as error:  # names, shapes
        message = " ".join(str(error).split())[:300]
        return CheckResult(False, f"{spec.hf_class} cannot take the IR's weights: {message}")
    diff = (ir - hf).abs().max().item()
    ok = ir.shape == hf.shape and torch.allclose(ir, hf, rtol=TOLERANCE, atol=TOLERANCE)
    return CheckResult(ok, f"vs {spec.hf_class}: max |IR - HF| {diff:.3g} (tol {TOLERANCE:g})")
