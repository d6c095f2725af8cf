"""Imported once by the forkserver that gloo ranks fork from (``spawn``): what every rank imports
anyway, so that a rank starts without importing it again."""

import torch._dynamo  # noqa: F401  export's tracer: else imported by a rank's first hint op
import transformers

from stagebot.harness.suites.sharding_ir import worker  # noqa: F401
from stagebot.harness.suites.sharding_ir.registry import REGISTRY

for _spec in REGISTRY.values():  # transformers imports its config classes lazily
    getattr(transformers, _spec.config_class)
