"""Small repositories written out file by file, for the tests that read a tree from disk."""

from __future__ import annotations

from pathlib import Path


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Each ``{relative path: text}`` written under ``root`` (folders made as needed); ``root``."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root
