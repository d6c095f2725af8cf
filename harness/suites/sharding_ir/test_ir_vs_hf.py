"""Each IR model against HF's own class on the same config and weights (fp32, HF's router).

Without this a wrong IR would still pass "sharded == unsharded".
"""

from __future__ import annotations

import pytest
import torch

from stagebot.harness.suites.sharding_ir.build import build_hf_model, build_ir_model, prefill_inputs
from stagebot.harness.suites.sharding_ir.dist_config import DistConfig
from stagebot.harness.suites.sharding_ir.registry import REGISTRY

CASES = [pytest.param(model_id, None, id=model_id) for model_id in REGISTRY] + [
    pytest.param(model_id, variant, id=f"{model_id}:{variant}")
    for model_id, spec in REGISTRY.items()
    for variant in spec.variants
]


def _logits(spec, overrides: dict):
    ir = build_ir_model(spec, overrides)
    hf = build_hf_model(spec, ir)
    ids, pos = prefill_inputs(ir.config.vocab_size, batch=2, seq=64)
    with torch.no_grad():
        return ir(ids, pos), hf(input_ids=ids, position_ids=pos, use_cache=False).logits


@pytest.mark.parametrize(("model_id", "variant"), CASES)
def test_ir_matches_hf(model_id, variant):
    spec = REGISTRY[model_id]
    overrides = spec.variants[variant](DistConfig.named("tep")) if variant else {}
    ir_logits, hf_logits = _logits(spec, overrides)
    torch.testing.assert_close(ir_logits, hf_logits, rtol=1e-5, atol=1e-5)


def test_a_changed_weight_is_seen():
    spec = REGISTRY["Qwen/Qwen3-8B"]
    ir = build_ir_model(spec)
    hf = build_hf_model(spec, ir)
    with torch.no_grad():
        hf.get_parameter("model.layers.3.mlp.down_proj.weight").mul_(1.01)
    ids, pos = prefill_inputs(ir.config.vocab_size, batch=1, seq=16)
    with torch.no_grad(), pytest.raises(AssertionError):
        torch.testing.assert_close(
            ir(ids, pos),
            hf(input_ids=ids, position_ids=pos, use_cache=False).logits,
            rtol=1e-5,
            atol=1e-5,
        )
