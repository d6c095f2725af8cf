"""Ledger files as they travel between jobs: their digests, and the SQLite side files that must
not come with them. A digest vouches for a ledger only if no side file could change it on open.
"""

from __future__ import annotations

import hashlib
import stat
from collections.abc import Callable
from pathlib import Path


def file_digest(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def side_files(ledger: Path) -> list[Path]:
    """The SQLite files beside a ledger: none once its last writer closed it."""
    return [ledger.with_name(ledger.name + suffix) for suffix in ("-wal", "-shm", "-journal")]


def planted_side_files(ledger: Path) -> list[str]:
    """Names of the side files that could change the ledger when it is opened, so that a digest
    of the main file alone does not vouch for it: a non-empty -wal or -journal, and any side
    file that is not a regular file (a link, a FIFO: SQLite would follow or block on it). A
    read-only reader leaves an empty -wal and a -shm, which change nothing."""
    planted = []
    for path in side_files(ledger):
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        content = info.st_size > 0 and not path.name.endswith("-shm")
        if not stat.S_ISREG(info.st_mode) or content:
            planted.append(path.name)
    return planted


def unvouched_reason(ledger: Path, recorded: Callable[[], set[str]], where: str) -> str | None:
    """Why the restored ``ledger`` is not one the bot saved, or None when it is: a side file that
    could change it, or a sha256 that none of ``where`` records (``recorded`` reads them, and
    is not called when a side file already decides)."""
    planted = planted_side_files(ledger)
    if planted:
        return f"{', '.join(planted)} lay beside it"
    if file_digest(ledger) not in recorded():
        return f"its sha256 is in none of {where}"
    return None


def artifact_files(plan: Path, ledger: Path) -> list[Path]:
    """What the plan job hands the report job: plan.json, the ledger and its side files (which
    must stay absent)."""
    return [plan, ledger, *side_files(ledger)]


def artifact_digest(paths: list[Path]) -> str:
    """sha256 over each file's name and content digest, an absent file counting as absent (not
    as empty): the plan job records it as a job output, which the stage jobs cannot touch, and
    the report job checks the downloaded artifact against it."""
    digest = hashlib.sha256()
    for path in paths:
        if path.is_symlink():
            content = "symlink"
        else:
            content = file_digest(path) if path.exists() else "absent"
        digest.update(f"{path.name}\0{content}\n".encode())
    return digest.hexdigest()
