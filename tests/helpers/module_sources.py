"""One small module written into a repository and read through the import graph's public
function: the facts the reuse tests check."""

from __future__ import annotations

import textwrap
from pathlib import Path

from helpers.files import write_tree
from stagebot.harness.reuse.import_graph import ModuleFacts, module_facts


def facts_of(root: Path, source: str, path: str = "pkg/mod.py") -> ModuleFacts:
    """``source`` (dedented) written to ``root/path``, and what ``module_facts`` reads in it."""
    write_tree(root, {path: textwrap.dedent(source)})
    return module_facts(str(root), path)
