"""A folder of compiled kernels shared by processes: every pytest shard of a stage, every run.

Entries are named by a digest of everything the compiled code depends on (see ``entry_name``),
so a stale entry is never read: a change of key, sources or versions names another file. Each
entry is written to a temporary file in the folder and renamed into place (atomic on POSIX),
so a reader sees a whole entry or none, and carries a SHA-256 of its payload, so a damaged one
is rebuilt. Building an entry holds an exclusive ``flock`` on its lock file: concurrent shards
that need the same kernel wait for one compile instead of each doing it.

The folder is ``$STAGEBOT_CUTE_CACHE_DIR``, else ``$XDG_CACHE_HOME/stagebot/cute``, else
``~/.cache/stagebot/cute``; ``STAGEBOT_CUTE_CACHE_DIR=off`` turns the cache off. Every source
change names new entries, so the folder is kept under ``$STAGEBOT_CUTE_CACHE_MAX_MB`` (default
1024): after a write, the least recently used entries go (a read refreshes an entry's mtime).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
ENV = "STAGEBOT_CUTE_CACHE_DIR"
MAX_MB_ENV = "STAGEBOT_CUTE_CACHE_MAX_MB"
DEFAULT_MAX_MB = 1024
OFF = "off"
SUFFIX = ".entry"
_MAGIC = b"stagebot-cute-cache 1\n"
_DIGEST = 32


def default_dir() -> Path | None:
    """The cache folder from the environment, or None when the cache is off."""
    configured = os.environ.get(ENV)
    if configured == OFF:
        return None
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "stagebot" / "cute"


def entry_name(parts: Iterable[str]) -> str:
    """A file name for the entry that ``parts`` (each a string, order significant) determine."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")  # ("ab", "c") and ("a", "bc") name different entries
    return h.hexdigest()


def default_max_bytes() -> int:
    raw = os.environ.get(MAX_MB_ENV, str(DEFAULT_MAX_MB))
    try:
        megabytes = float(raw)
    except ValueError:
        raise ValueError(f"{MAX_MB_ENV}={raw!r}: it must be a number of megabytes") from None
    return int(megabytes * (1 << 20))


class DiskCache:
    def __init__(self, folder: Path, max_bytes: int | None = None) -> None:
        self.folder = Path(folder)
        self.max_bytes = default_max_bytes() if max_bytes is None else max_bytes

    def path(self, name: str) -> Path:
        return self.folder / f"{name}{SUFFIX}"

    def read(self, name: str) -> bytes | None:
        """The entry's payload; None when it is missing or damaged (a damaged one is removed)."""
        try:
            data = self.path(name).read_bytes()
        except FileNotFoundError:
            return None
        head = len(_MAGIC) + _DIGEST
        payload = data[head:]
        if data[: len(_MAGIC)] != _MAGIC or data[len(_MAGIC) : head] != _sha256(payload):
            warnings.warn(f"{self.path(name)}: damaged cache entry, rebuilding it", stacklevel=2)
            self.path(name).unlink(missing_ok=True)
            return None
        with contextlib.suppress(OSError):  # a read-only folder is still read
            os.utime(self.path(name))  # recently used: pruned last
        return payload

    def write(self, name: str, payload: bytes) -> None:
        """Writes the entry whole or not at all: a temporary file renamed into place."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + _sha256(payload) + payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path(name))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.prune(keep=name)

    def prune(self, keep: str) -> None:
        """Removes the least recently used entries (never ``keep``) until the folder's entries
        fit in max_bytes. A concurrent reader of a removed entry sees a miss and rebuilds."""
        entries = []
        for path in self.folder.glob(f"*{SUFFIX}"):
            try:
                stat = path.stat()
            except FileNotFoundError:  # pruned by another process meanwhile
                continue
            entries.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes:
                break
            if path != self.path(keep):
                path.unlink(missing_ok=True)
                total -= size

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Exclusive across processes (flock on ``<name>.lock``; released if the holder dies)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"{name}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def get_or_build(
        self,
        name: str,
        load: Callable[[bytes], T],
        build: Callable[[], tuple[T, bytes | None]],
    ) -> tuple[T, bool]:
        """(the object, whether it came from the folder). ``build`` returns the object and its
        payload (None: not storable). An entry that ``load`` rejects is rebuilt."""
        with self.lock(name):
            payload = self.read(name)
            if payload is not None:
                try:
                    return load(payload), True
                except Exception as error:  # a payload this build cannot load: rebuild it
                    warnings.warn(
                        f"{self.path(name)}: unloadable ({error}); rebuilding it", stacklevel=2
                    )
            obj, payload = build()
            if payload is not None:
                self.write(name, payload)
            return obj, False


def _sha256(payload: bytes) -> bytes:
    return hashlib.sha256(payload).digest()
