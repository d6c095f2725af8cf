"""The ledger's SQLite file: opening it safely (checks, WAL, migrations, untrusted files),
short write transactions, queries, and the errors a ledger that cannot be used raises.

A ledger that stays locked past the busy timeout, is corrupt, or cannot be written raises
``LedgerError`` (exit 3) before anything runs, and the file is left as it was.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Self, TypeVar

from stagebot.harness.ledger.schema import (
    LEDGER_TABLES,
    MIGRATIONS,
    READABLE_VERSIONS,
    SCHEMA,
    SCHEMA_VERSION,
)
from stagebot.stages.errors import StagebotError

T = TypeVar("T")
DEFAULT_BUSY_TIMEOUT_S = 30.0
BUSY_TIMEOUT_ENV = "STAGEBOT_LEDGER_BUSY_TIMEOUT"
RECORD_PATIENCE_S = 60.0
SQLITE_HEADER = b"SQLite format 3\x00"
DEFAULT_REPO = "local"


class LedgerError(StagebotError):
    """The ledger cannot be used (locked, corrupt, unwritable); nothing ran or changed."""

    exit_code = 3


class UnknownPipelineError(StagebotError):
    """A command names a pipeline the ledger does not have (a user error: exit 2)."""


class LedgerBusyError(LedgerError):
    """The ledger stayed locked by another process past the busy timeout."""


def retry_busy(call: Callable[[], T], patience_s: float | None = None) -> T:
    """``call()``, retried while the ledger stays busy, for up to ``patience_s`` seconds in all
    (default: ten busy timeouts, at least 60 s). For writes during a run: a result that was
    produced must not be lost because another process held the lock a little too long."""
    if patience_s is None:
        patience_s = max(10 * busy_timeout_s(), RECORD_PATIENCE_S)
    return _retry(call, lambda error: isinstance(error, LedgerBusyError), patience_s, 0.2)


def _retry(
    call: Callable[[], T], busy: Callable[[Exception], bool], patience_s: float, pause_s: float
) -> T:
    """``call()``, again every ``pause_s`` while it fails ``busy``, until ``patience_s`` passed.

    The ledger's one retry loop (tenacity would do it too, but costs every ``Ledger.open``
    its import; GitHub calls have their own policy in bot/github/retry.py)."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            return call()
        except Exception as error:
            if not busy(error) or time.monotonic() >= deadline:
                raise
            time.sleep(pause_s)


def busy_timeout_s() -> float:
    """The busy timeout. Precedence: ``$STAGEBOT_LEDGER_BUSY_TIMEOUT`` > default (30 s)."""
    raw = os.environ.get(BUSY_TIMEOUT_ENV)
    try:
        return float(raw) if raw else DEFAULT_BUSY_TIMEOUT_S
    except ValueError:
        raise LedgerError(
            f"${BUSY_TIMEOUT_ENV}={raw!r} is not a number of seconds (e.g. 30)"
        ) from None


class Store:
    """An open ledger file: the connection, its path, read-only or not, the repository whose
    pipelines it reads and writes, and the schema version it holds."""

    def __init__(self, connection: sqlite3.Connection, path: Path, readonly: bool, repo: str):
        self.connection = connection
        self.path = path
        self.readonly = readonly
        self.repo = repo
        self.version = SCHEMA_VERSION

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        readonly: bool = False,
        busy_timeout: float | None = None,
        repo: str = DEFAULT_REPO,
    ) -> Self:
        """Open (or create) the ledger at ``path``; LedgerError when it is unusable."""
        path = Path(path)
        timeout = busy_timeout_s() if busy_timeout is None else busy_timeout
        _check_file(path, readonly)
        try:
            if readonly:
                connection = sqlite3.connect(
                    f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout
                )
            else:
                connection = sqlite3.connect(path, timeout=timeout, isolation_level=None)
            connection.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            connection.row_factory = sqlite3.Row
            ledger = cls(connection, path, readonly, repo)
            ledger._check_intact()
            if not readonly:
                ledger._set_up(timeout)
            else:
                ledger._harden()
                ledger._check_schema()
            return ledger
        except sqlite3.Error as error:
            raise _ledger_error(path, error, timeout) from None

    def _check_intact(self) -> None:
        """Refuse, before anything reads or writes it, a file SQLite finds damaged (``PRAGMA
        quick_check``: every page's structure, in one pass over the file)."""
        problems = [row[0] for row in self.connection.execute("PRAGMA quick_check(3)")]
        if problems != ["ok"]:
            self.connection.close()
            raise LedgerError(
                f"ledger {self.path} is corrupt (SQLite's quick_check: {'; '.join(problems)}); "
                "it was left as it is: restore it from a copy or give a new --ledger"
            )

    def _set_up(self, timeout: float) -> None:
        """Switch to WAL and create the schema. SQLite answers "busy" at once, without its busy
        handler, while another process does the same on a new file (to avoid a deadlock), so
        retry until the busy timeout has passed."""

        def once() -> None:
            try:
                self._set_up_once()
            except sqlite3.OperationalError:
                if self.connection.in_transaction:
                    self.connection.execute("ROLLBACK")
                raise

        _retry(once, _is_busy, timeout, 0.05)

    def _set_up_once(self) -> None:
        self._check_schema(new_ok=True)  # before anything is written (the WAL switch included)
        mode = self.connection.execute("PRAGMA journal_mode").fetchone()[0]
        if mode != "wal":
            self.connection.execute("PRAGMA journal_mode = WAL")
        with self._write():
            version = self.connection.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise LedgerError(
                    f"ledger {self.path} has schema version {version}; this stagebot reads "
                    f"version {SCHEMA_VERSION} (upgrade stagebot or use another --ledger)"
                )
            scripts = [SCHEMA] if version == 0 else []
            scripts += [MIGRATIONS[n] for n in range(max(version, 1) + 1, SCHEMA_VERSION + 1)]
            for script in scripts:
                for statement in filter(str.strip, script.split(";")):
                    self.connection.execute(statement)
            self.connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self.version = SCHEMA_VERSION

    def _harden(self) -> None:
        """A read-only open is of a file that may come from untrusted hands (a restored cache,
        main's ledger before its digest is checked): SQLite's defences for untrusted databases
        (defensive mode where Python offers it, no schema-defined functions, no memory map,
        cell checks as pages are read), then refuse what the bot never creates (views,
        triggers, virtual tables) before any query reads it. No quick_check: that would scan
        the whole file on every open."""
        connection = self.connection
        if hasattr(connection, "setconfig"):  # Python 3.12+
            connection.setconfig(sqlite3.SQLITE_DBCONFIG_DEFENSIVE, True)
        for pragma in ("trusted_schema = OFF", "mmap_size = 0", "cell_size_check = ON"):
            connection.execute(f"PRAGMA {pragma}")
        foreign = connection.execute(
            "SELECT type, name FROM sqlite_master WHERE type IN ('view', 'trigger') "
            "OR (type = 'table' AND sql LIKE 'CREATE VIRTUAL%')"
        ).fetchall()
        if foreign:
            names = ", ".join(f"{row[0]} {row[1]!r}" for row in foreign)
            raise LedgerError(
                f"ledger {self.path} holds {names}, which stagebot never creates: not a ledger "
                "the bot saved (use another --ledger)"
            )

    def _check_schema(self, new_ok: bool = False) -> None:
        """Refuse, without writing, a database that is not a stagebot ledger of our version (an
        empty database is a new ledger when ``new_ok``). Both reads share one snapshot: another
        process creating the schema between them would otherwise look like a foreign database
        (version 0 with tables)."""
        self.connection.execute("BEGIN")
        try:
            version = self.connection.execute("PRAGMA user_version").fetchone()[0]
            listed = self.connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
            tables = {row[0] for row in listed}
        finally:
            self.connection.execute("COMMIT")
        if new_ok and version == 0 and not tables:
            return
        if LEDGER_TABLES <= tables and (
            version == SCHEMA_VERSION
            or (version in READABLE_VERSIONS and (self.readonly or new_ok))
        ):
            self.version = version  # an older one is migrated by _set_up_once
            return
        if version > SCHEMA_VERSION and LEDGER_TABLES <= tables:
            raise LedgerError(
                f"ledger {self.path} has schema version {version}; this stagebot reads "
                f"version {SCHEMA_VERSION} (upgrade stagebot or use another --ledger)"
            )
        listing = ", ".join(sorted(tables)) or "none"
        raise LedgerError(
            f"ledger {self.path} is an SQLite database but not a stagebot ledger (schema version "
            f"{version}, tables: {listing}); it was left as it is: give --ledger a new file path "
            "or an existing stagebot ledger"
        )

    def close(self) -> None:
        self.connection.close()

    def checkpoint(self) -> None:
        """Write every committed change into the main file and empty the WAL: the file alone is
        then the ledger as it is now, byte for byte what it will be once closed."""
        if self.readonly:
            return
        busy = self.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        if busy:
            raise LedgerBusyError(
                f"ledger {self.path}: another connection kept the WAL from being written back; "
                "close it and try again"
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.readonly:
            raise LedgerError(f"ledger {self.path} was opened read-only")
        try:
            self.connection.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:
            raise _ledger_error(self.path, error, busy_timeout_s()) from None
        try:
            yield self.connection
        except sqlite3.Error as error:
            if self.connection.in_transaction:
                self.connection.execute("ROLLBACK")
            raise _ledger_error(self.path, error, busy_timeout_s()) from None
        except BaseException:
            if self.connection.in_transaction:
                self.connection.execute("ROLLBACK")
            raise
        else:
            try:
                self.connection.execute("COMMIT")
            except sqlite3.Error as error:
                raise _ledger_error(self.path, error, busy_timeout_s()) from None

    def _id(self, number: int) -> int:
        row = self.connection.execute(
            "SELECT id FROM pipelines WHERE repo = ? AND number = ?", (self.repo, number)
        ).fetchone()
        if row is None:
            raise LedgerError(f"ledger {self.path} has no pipeline #{number}")
        return row[0]

    def _query(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        try:
            return self.connection.execute(sql, params).fetchall()
        except sqlite3.Error as error:
            raise _ledger_error(self.path, error, busy_timeout_s()) from None

    def _query_one(self, sql: str, params: tuple = ()) -> sqlite3.Row | None:
        rows = self._query(sql, params)
        return rows[0] if rows else None


def _check_file(path: Path, readonly: bool) -> None:
    """Refuse, without touching anything, a path that is not a usable ledger."""
    if path.is_dir():
        raise LedgerError(
            f"ledger {path} is a folder; give a file path such as {path}/ledger.sqlite"
        )
    if path.exists():
        try:
            with open(path, "rb") as file:
                header = file.read(len(SQLITE_HEADER))
        except OSError as error:
            raise LedgerError(f"ledger {path} cannot be read: {error.strerror}") from None
        if header and header != SQLITE_HEADER[: len(header)] or 0 < len(header) < 16:
            raise LedgerError(
                f"ledger {path} is corrupt: not an SQLite database (bad header); restore it "
                "from a copy or give a new path with --ledger"
            )
        if not readonly and not os.access(path, os.W_OK):
            raise LedgerError(f"ledger {path} is not writable; fix its permissions or use --ledger")
    elif readonly:
        raise LedgerError(f"ledger {path} does not exist; give an existing ledger file")
    if not readonly:
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise LedgerError(
                f"ledger {path} cannot be created: {parent} is not a folder; create it first"
            )
        if not os.access(parent, os.W_OK | os.X_OK):
            raise LedgerError(
                f"ledger {path} is not writable: its folder {parent} does not allow writing "
                "(SQLite's WAL needs to create files beside it)"
            )


def _is_busy(error: Exception) -> bool:
    text = str(error)
    return isinstance(error, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def _ledger_error(path: Path, error: sqlite3.Error, timeout: float) -> LedgerError:
    text = str(error)
    if _is_busy(error):
        return LedgerBusyError(
            f"ledger {path} is still locked by another process after the {timeout:g} s busy "
            f"timeout; wait for it to finish (or raise ${BUSY_TIMEOUT_ENV})"
        )
    if "malformed" in text or "not a database" in text or "corrupt" in text:
        return LedgerError(
            f"ledger {path} is corrupt ({text}); restore it from a copy or give a new --ledger"
        )
    if "readonly" in text or "read-only" in text or "unable to open" in text:
        return LedgerError(f"ledger {path} is not writable ({text}); fix its permissions")
    return LedgerError(f"ledger {path} cannot be used: {text}")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
