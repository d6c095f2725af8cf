"""The one decoding policy for text from a test process: bytes that are not UTF-8 are shown as
``\\xNN``, never dropped and never a crash.

A test's output, its error message and even its id can hold bytes that are not UTF-8 (a file name
from ``os.listdir``, a C extension's message). Python carries them as lone surrogates
(``surrogateescape``); SQLite, ``str.encode`` and GitHub refuse those. So every text is decoded
here where it enters the harness (the shard's log, its ``tests.jsonl``, a ``result.json``) and
again where it leaves for the ledger: each byte that is not UTF-8 becomes the four characters
``\\xNN``, the same in the ledger, the JUnit XML, the reply and the HTML.
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def text_of(data: bytes) -> str:
    """``data`` as text: UTF-8, with each byte that is not UTF-8 written as ``\\xNN``."""
    return data.decode("utf-8", "backslashreplace")


def clean(text: str) -> str:
    """``text`` without lone surrogates: an escaped byte (U+DC80..U+DCFF) as ``\\xNN``, any
    other as ``\\uNNNN``."""
    return _SURROGATE.sub(_shown, text)


def clean_json(value: Any) -> Any:
    """Every string in a parsed JSON value (keys too) cleaned."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean_json(key): clean_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [clean_json(item) for item in value]
    return value


def _shown(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"
