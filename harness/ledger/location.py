"""Where a repository's local state lives unless told otherwise: its ledger and its pipelines'
output folders, outside the repository, out of reach of the code under test (a PR's test may
delete or rewrite anything in its checkout, ``out/`` included):
``$XDG_STATE_HOME/stagebot/<repository>-<digest of its path>/`` (``~/.local/state`` when unset).

The former default ledger, ``out/ledger.sqlite`` inside the repository, is still used where it
exists (its history is kept); ``bot run`` says where the ledger is, and how to move that one.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

LEDGER_FILE = "ledger.sqlite"
FORMER_LEDGER = Path("out") / LEDGER_FILE  # the default before it moved out of the repository


def state_folder(root: Path, key: Path | None = None) -> Path:
    """``<state home>/stagebot/<root's name>-<digest>``: the digest of ``key`` (default: the
    root), resolved, so two checkouts of one name (or two ledgers of one repository) differ."""
    home = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    digest = hashlib.sha256(str(Path(key or root).resolve()).encode()).hexdigest()[:10]
    return home / "stagebot" / f"{Path(root).resolve().name}-{digest}"


def default_ledger(root: Path) -> Path:
    """The ledger of the repository at ``root``: its former place ``out/ledger.sqlite`` where one
    exists there, else in the repository's state folder."""
    former = root / FORMER_LEDGER
    return former if former.is_file() else state_folder(root) / LEDGER_FILE


def is_former_ledger(root: Path, ledger: Path) -> bool:
    """``ledger`` is the former default inside the repository (a PR's code can delete it)."""
    return Path(ledger).resolve() == (root / FORMER_LEDGER).resolve()


def default_out_folder(root: Path, ledger: Path, number: int) -> Path:
    """Where pipeline ``number`` of ``ledger`` writes its shard folders and reports without
    ``--out``: beside the repository's default ledger, else in a state folder of its own for
    that ledger (each ledger numbers its pipelines from 1)."""
    folder = state_folder(root)
    if Path(ledger).resolve() != (folder / LEDGER_FILE).resolve():
        folder = state_folder(root, ledger)
    return folder / f"pipeline-{number}"


def default_stage_folder(root: Path, pipeline: int, stage: str) -> Path:
    """Where `bot run-stage` writes a shard's folder without ``--out`` (it has no ledger: apart
    from the folders of `bot run`'s pipelines, whose numbers are the ledger's)."""
    return state_folder(root) / "run-stage" / f"pipeline-{pipeline}" / stage
