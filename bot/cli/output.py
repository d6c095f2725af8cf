"""Writing to a standard stream the reader may close (`bot run … | head -1`): the command goes on
to its true end and exit code, its later output dropped quietly, as command-line tools do."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


def detach(stream) -> None:
    """Point ``stream``'s file descriptor at the null device: what is still buffered, and all
    later output, goes nowhere instead of raising BrokenPipeError again (at exit too)."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, stream.fileno())
    finally:
        os.close(null)


def quiet_when_closed(write: Callable[[str], None], stream) -> Callable[[str], None]:
    """``write``, but once the reader of ``stream`` has gone, nothing more is written."""

    def guarded(text: str) -> None:
        try:
            write(text)
        except BrokenPipeError:
            detach(stream)

    return guarded


def stdout_closed() -> None:
    """The reader of stdout went away before a command finished writing: stop quietly."""
    detach(sys.stdout)
