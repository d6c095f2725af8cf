"""Imported once by the forkserver that gloo ranks fork from (``spawn``): what every rank imports
anyway, so that a rank starts without importing it again, and one small export, so that each
rank's first ``torch.export`` does not pay the tracer's own first-use costs (lazy imports, op
registrations): 15-20 s per rank on the loaded 2-core machine, more than the rank's real work.
The export runs on fake tensors and a one-layer model too small for a parallel region, so no
thread pool exists to be broken by the fork."""

import torch
import torch._dynamo  # noqa: F401  export's tracer: else imported by a rank's first hint op
import transformers

from stagebot.harness.suites.sharding_ir import worker  # noqa: F401
from stagebot.harness.suites.sharding_ir.build import build_ir_model, prefill_inputs
from stagebot.harness.suites.sharding_ir.registry import REGISTRY

for _spec in REGISTRY.values():  # transformers imports its config classes lazily
    getattr(transformers, _spec.config_class)

_WARM_UP = "mistralai/Mixtral-8x7B-v0.1"  # every layer sparse: the MoE hint in one layer
_model = build_ir_model(REGISTRY[_WARM_UP], {"num_hidden_layers": 1}, fixed_routing=True)
torch.export.export(_model, prefill_inputs(_model.arch.vocab_size, batch=1, seq=4))
del _model
