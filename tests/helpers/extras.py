"""Tests that need a package of an optional extra skip without it, naming the extra that
installs it (the README's test command installs them all; a plain `pip install -e '.[test]'`
runs the rest)."""

from __future__ import annotations

import importlib.util

import pytest

EXTRA = {"torch": "harness", "transformers": "harness", "cutlass": "kernels", "triton": "kernels"}


def reason(module: str) -> str:
    extra = EXTRA[module]
    return (
        f"{module} is not importable: the [{extra}] extra installs it (pip install -e '.[{extra}]')"
    )


def needs(*modules: str) -> pytest.MarkDecorator:
    """A skip mark for tests that need every one of ``modules``."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason="; ".join(map(reason, missing)))


def require(module: str):
    """``module``, imported, or a skip of the test (or of the whole module, at its top)."""
    return pytest.importorskip(module, reason=reason(module))
