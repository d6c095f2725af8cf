"""The code a local run tests: the commit, and whether the work tree differs from it.

A clean tree's identity is its commit SHA. A dirty tree (changed tracked files, or untracked files
that git does not ignore) is not "the same commit": its identity is ``<sha>+dirty.<digest>``, the
digest covering the diff and the untracked files' contents, so only the very same dirty state can
reuse earlier results.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path


def _git(root: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", *args], cwd=root, capture_output=True, check=True, timeout=60
    ).stdout


def tree_identity(root: Path) -> tuple[str | None, bool]:
    """(identity, dirty): None when ``root`` is not in a git work tree."""
    try:
        sha = _git(root, "rev-parse", "HEAD").decode().strip()
        diff = _git(root, "diff", "HEAD", "--binary")
        untracked = _git(root, "ls-files", "--others", "--exclude-standard", "-z").split(b"\0")
    except (subprocess.SubprocessError, OSError):
        return None, False
    untracked = sorted(path for path in untracked if path)
    if not diff and not untracked:
        return sha, False
    digest = hashlib.sha256(diff)
    top = Path(_git(root, "rev-parse", "--show-toplevel").decode().strip())
    for path in untracked:
        digest.update(b"\0" + path + b"\0")
        try:
            digest.update((top / path.decode()).read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
    return f"{sha}+dirty.{digest.hexdigest()[:12]}", True


def changed_between(root: Path, old: str, new: str) -> list[str] | None:
    """Files changed between two commits (None when git cannot tell, e.g. an unknown SHA)."""
    try:
        out = _git(root, "diff", "--name-only", old.split("+")[0], new.split("+")[0])
    except (subprocess.SubprocessError, OSError):
        return None
    return [line for line in out.decode().splitlines() if line]
