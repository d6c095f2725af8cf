"""The code a local run tests: the repository root, the commit, and whether the work tree
differs from it.

A clean tree's identity is its commit SHA. A dirty tree (changed tracked files, or untracked files
that git does not ignore) is not "the same commit": its identity is ``<sha>+dirty.<digest>``, the
digest covering the diff and the untracked files' contents, so only the very same dirty state can
reuse earlier results. stagebot's own outputs (the run's ``--out`` folder, the ledger and its side
files) are never a change: writing them must not stop the next run's reuse.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

OUTPUT_GITIGNORE = "# stagebot's outputs: not a change of the work tree\n*\n"
SIDE = ("-wal", "-shm", "-journal")  # SQLite's side files of a ledger


def _git(root: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", *args], cwd=root, capture_output=True, check=True, timeout=60
    ).stdout


def repository_root(start: Path) -> Path:
    """The top of the git work tree holding ``start`` (so a run from a subfolder finds the
    suites, the ledger and ``out/`` where a run from the top does); ``start`` outside git."""
    try:
        return Path(_git(start, "rev-parse", "--show-toplevel").decode().strip())
    except (subprocess.SubprocessError, OSError):
        return start


def tree_identity(root: Path, outputs: Iterable[Path] = ()) -> tuple[str | None, bool]:
    """(identity, dirty): None when ``root`` is not in a git work tree. Untracked files at or
    under ``outputs`` (stagebot's own: the out folder, the ledger) are not changes; a ledger's
    ``-wal`` / ``-journal`` side files count as the ledger."""
    try:
        sha = _git(root, "rev-parse", "HEAD").decode().strip()
        diff = _git(root, "diff", "HEAD", "--binary")
        top = Path(_git(root, "rev-parse", "--show-toplevel").decode().strip())
        untracked = _git(top, "ls-files", "--others", "--exclude-standard", "-z").split(b"\0")
    except (subprocess.SubprocessError, OSError):
        return None, False
    own = [Path(os.path.abspath(path)) for path in outputs]
    untracked = sorted(
        path for path in untracked if path and not _is_output(top / path.decode(), own)
    )
    if not diff and not untracked:
        return sha, False
    digest = hashlib.sha256(diff)
    for path in untracked:
        digest.update(b"\0" + path + b"\0")
        try:
            digest.update((top / path.decode()).read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
    return f"{sha}+dirty.{digest.hexdigest()[:12]}", True


def _is_output(path: Path, outputs: list[Path]) -> bool:
    path = Path(os.path.abspath(path))
    return any(
        path == out or out in path.parents or path in [out.with_name(out.name + s) for s in SIDE]
        for out in outputs
    )


def make_output_folder(folder: Path) -> None:
    """Create ``folder`` for stagebot's outputs; one it creates (or finds empty) gets a
    ``.gitignore`` of ``*``, so git, and the next run's identity, never see its files."""
    folder.mkdir(parents=True, exist_ok=True)
    if not any(folder.iterdir()):
        (folder / ".gitignore").write_text(OUTPUT_GITIGNORE, encoding="utf-8")


def changed_between(root: Path, old: str, new: str) -> list[str] | None:
    """Files changed between two commits (None when git cannot tell, e.g. an unknown SHA)."""
    try:
        out = _git(root, "diff", "--name-only", old.split("+")[0], new.split("+")[0])
    except (subprocess.SubprocessError, OSError):
        return None
    return [line for line in out.decode().splitlines() if line]


def merge_base(root: Path, commit: str, branch: str) -> str | None:
    """The merge-base of ``commit`` (a dirty identity counts as its commit) with ``branch``, or
    with ``origin/<branch>`` where there is no local one; None when git cannot tell."""
    for ref in (branch, f"origin/{branch}"):
        try:
            return _git(root, "merge-base", commit.split("+")[0], ref).decode().strip()
        except (subprocess.SubprocessError, OSError):
            continue
    return None


def resolve_commit(root: Path, prefix: str) -> str | None:
    """The full SHA git knows for ``prefix``; None when git knows none, or more than one."""
    try:
        found = _git(root, "rev-parse", "--verify", "--quiet", f"{prefix}^{{commit}}")
    except (subprocess.SubprocessError, OSError):
        return None
    return found.decode().strip()
