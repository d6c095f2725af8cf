"""Damaged zip archives, as a broken upload or a hostile artifact leaves them."""

from __future__ import annotations


def corrupt(data: bytes, name: str) -> bytes:
    """``data`` (a zip whose first member is ``name``) with that member's stored bytes damaged."""
    start = 30 + len(name) + int.from_bytes(data[28:30], "little")  # after the local header
    return data[:start] + bytes([data[start] ^ 0xFF]) + data[start + 1 :]
