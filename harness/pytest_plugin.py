"""The project's one pytest plugin (entry point ``pytest11``: ``stagebot``).

It registers every harness suite's command-line options from a name -> module table, so
``pytest harness/suites/...`` accepts all of them wherever it is run from. A suite adds one line to
``SUITE_OPTIONS``; its options module exposes ``add_options(group)`` and must stay light (no torch
at import time), since every pytest run in an environment with stagebot installed loads it.
"""

from __future__ import annotations

import importlib

SUITE_OPTIONS: dict[str, str] = {
    "sharding_ir": "stagebot.harness.suites.sharding_ir.options",
    "nvfp4_moe": "stagebot.harness.suites.nvfp4_moe.options",
}


def pytest_addoption(parser) -> None:
    for suite, module_name in SUITE_OPTIONS.items():
        group = parser.getgroup(f"stagebot-{suite}", f"stagebot suite {suite}")
        importlib.import_module(module_name).add_options(group)
