"""Which cute kernels each case of the suite asked for, kept beside the kernel cache.

A cold run (an empty cache, or kernel sources changed, which renames every entry) would compile
its kernels one by one as the cases reach them. With this record of an earlier run (or, where a
case has none, its keys in the committed plan, kernel_plan) the session compiles them all at
once while the cases run (stagebot.kernels.cute.warm, started by the conftest). The record is
one JSON file per case under ``<cache folder>/manifests/nvfp4_moe/``, written whole by rename,
so concurrent shards and a killed run leave every file whole or absent; a file this version
cannot read is removed and rewritten by its case's next run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from stagebot.kernels.cute.compile import CompileKey, key_from_json, key_to_json

SUBFOLDER = Path("manifests", "nvfp4_moe")


def record_path(folder: Path, nodeid: str) -> Path:
    return folder / SUBFOLDER / f"{hashlib.sha256(nodeid.encode()).hexdigest()[:32]}.json"


def write(folder: Path, nodeid: str, keys: Iterable[CompileKey]) -> None:
    """Records the case's keys (a no-op when the record already says the same)."""
    text = json.dumps(
        {"nodeid": nodeid, "keys": sorted((key_to_json(k) for k in keys), key=json.dumps)},
        sort_keys=True,
    )
    path = record_path(folder, nodeid)
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read(folder: Path, nodeids: Iterable[str]) -> dict[str, list[CompileKey]]:
    """The recorded keys of each of ``nodeids`` that has a readable record."""
    found = {}
    for nodeid in nodeids:
        path = record_path(folder, nodeid)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:  # none yet, or a folder this process cannot read
            continue
        try:
            data = json.loads(text)
            if data["nodeid"] != nodeid:
                raise ValueError(f"the record is of {data['nodeid']!r}")
            found[nodeid] = [key_from_json(k) for k in data["keys"]]
        except (ValueError, TypeError, KeyError, AttributeError):  # damaged, or another version's
            with contextlib.suppress(OSError):  # a read-only folder keeps it
                path.unlink(missing_ok=True)
    return found
