"""One wording for "unknown X": the close matches ("did you mean"), else the valid choices."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

EXCERPT_CHARS = 40


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` quoted for an error message, cut to ``limit`` characters (a 64 KB token is not
    echoed back whole): ``'aaaa…' (65536 characters)``."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


def unknown(what: str, given: str, valid: Iterable[str], *, listing: str | None = None) -> str:
    """``unknown stage 'A10-Pytorch-1'; did you mean 'A10-PyTorch-1'?`` When nothing is close,
    the valid choices follow, or ``listing`` (e.g. where to find them) when they are many."""
    choices = list(valid)
    close = difflib.get_close_matches(given, choices, n=3, cutoff=0.6)
    if close:
        return f"unknown {what} {excerpt(given)}; did you mean {' or '.join(map(repr, close))}?"
    return f"unknown {what} {excerpt(given)} ({listing or 'valid: ' + ', '.join(choices)})"
