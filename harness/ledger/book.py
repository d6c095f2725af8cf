"""The pipeline ledger: every pipeline, its shards' StageResults and per-test outcomes, in SQLite.

One data model, locally (a file) and in Actions (the file travels between a PR's pipelines as an
artifact). WAL mode and short ``BEGIN IMMEDIATE`` transactions make it safe under concurrent
``bot`` processes: each gets its own pipeline number. A ledger that stays locked past the busy
timeout, is corrupt, or cannot be written raises ``LedgerError`` (exit 3) before anything runs,
and the file is left as it was.

API (also used by the GitHub adapter)::

    ledger = Ledger.open(path)                      # or readonly=True; `with` closes it
    number = ledger.start_pipeline(commit=..., command=..., plan=..., pr=..., branch=...)
    ledger.record_result(number, result, logs={test_id: text}, reused_tests={test_id: (n, s)})
    ledger.finish_pipeline(number, "SUCCESS")
    record = ledger.pipeline(number)                # PipelineRecord, with its StageResults
    ledger.prior_shard(stage, commit, pipeline)     # the planner's History protocol
    ledger.durations("CPU-PyTorch")                 # test id -> seconds, for shard splitting
    ledger.pinned_split(family, commit, digest, n)  # the split earlier runs on this commit used
    ledger.base_pipeline(base_commit, "main")       # the pipeline failures are compared with
    ledger.test_outcomes(n)                         # (stage family, test id) -> outcome
    ledger.test_history("main") / failure_evidence("main")  # what harness/analysis/flakiness.py
    reads ledger.latest_validating(pr) / record_validated(...)    # what harness/reuse/policy.py
    uses ledger.trusted_passes(family, pr=..., branch=..., default_branch="main")  # reuse by key
    ledger.latest_key(test_id) / key_reuse_sources(n) / record_fault(...) / reuse_faults()

Schema version 2 adds the dependency keys (docs/reuse.md): ``test_keys`` (one row per test a
shard ran to an outcome: its key, its six parts' digests, why it is conservative), ``key_files``
(per pipeline and test file, the digests of the files the key read), ``reuse_faults`` and
``tests.reused_by`` ('commit' | 'key', beside ``reused_from``). A version-1 ledger is migrated
when opened for writing (``MIGRATIONS``) and read as it is when opened read-only.

The store holds no policy: which pipeline may validate a commit (harness/reuse/policy.py) and
which tests are flaky (harness/analysis/flakiness.py) are decided over what it returns.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from stagebot.harness.decoding import clean, clean_json
from stagebot.harness.results import StageResult, TestOutcome
from stagebot.stages.errors import StagebotError
from stagebot.stages.history import PriorShard
from stagebot.stages.names import stage_family
from stagebot.stages.plan import Plan

T = TypeVar("T")
SCHEMA_VERSION = 2
DEFAULT_BUSY_TIMEOUT_S = 30.0
BUSY_TIMEOUT_ENV = "STAGEBOT_LEDGER_BUSY_TIMEOUT"
RECORD_PATIENCE_S = 60.0
HISTORY_PIPELINES = 20  # how far back main's flaky history looks
SQLITE_HEADER = b"SQLite format 3\x00"
LEDGER_TABLES = {"pipelines", "shards", "tests"}
DEFAULT_REPO = "local"
FINAL_STATES = ("SUCCESS", "FAILURE", "ABORTED", "NOT_RUN")
SCHEMA = """
CREATE TABLE IF NOT EXISTS pipelines (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    repo TEXT NOT NULL,
    number INTEGER NOT NULL,
    pr INTEGER,
    commit_id TEXT,
    branch TEXT,
    base_commit TEXT,
    command TEXT NOT NULL,
    plan TEXT,
    catalog_digest TEXT,
    gating INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    validated_by INTEGER,
    meta TEXT NOT NULL DEFAULT '{}',
    UNIQUE (repo, number)
);
CREATE TABLE IF NOT EXISTS shards (
    pipeline_id INTEGER NOT NULL REFERENCES pipelines(id),
    stage TEXT NOT NULL,
    state TEXT NOT NULL,
    duration_s REAL NOT NULL,
    result TEXT NOT NULL,
    PRIMARY KEY (pipeline_id, stage)
);
CREATE TABLE IF NOT EXISTS tests (
    pipeline_id INTEGER NOT NULL REFERENCES pipelines(id),
    stage TEXT NOT NULL,
    test_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    duration_s REAL NOT NULL,
    evidence TEXT,
    attempts INTEGER NOT NULL DEFAULT 1,
    reused_from INTEGER,
    log TEXT,
    PRIMARY KEY (pipeline_id, stage, test_id)
);
CREATE INDEX IF NOT EXISTS pipelines_by_commit ON pipelines (repo, commit_id);
CREATE INDEX IF NOT EXISTS tests_by_stage ON tests (stage);
"""
# Version n+1 from version n: MIGRATIONS[n + 1]. A new ledger is SCHEMA and then every migration.
MIGRATIONS = {
    2: """
ALTER TABLE tests ADD COLUMN reused_by TEXT;
UPDATE tests SET reused_by = 'commit' WHERE reused_from IS NOT NULL;
CREATE TABLE test_keys (
    pipeline_id INTEGER NOT NULL REFERENCES pipelines(id),
    stage TEXT NOT NULL,
    test_id TEXT NOT NULL,
    family TEXT NOT NULL,
    key TEXT NOT NULL,
    parts TEXT NOT NULL,
    conservative TEXT,
    test_file TEXT NOT NULL,
    PRIMARY KEY (pipeline_id, stage, test_id)
);
CREATE INDEX test_keys_by_family ON test_keys (family, test_id);
CREATE TABLE key_files (
    pipeline_id INTEGER NOT NULL REFERENCES pipelines(id),
    test_file TEXT NOT NULL,
    files BLOB NOT NULL,
    PRIMARY KEY (pipeline_id, test_file)
);
CREATE TABLE reuse_faults (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    repo TEXT NOT NULL,
    family TEXT NOT NULL,
    test_id TEXT NOT NULL,
    pipeline INTEGER NOT NULL,
    source INTEGER NOT NULL,
    detail TEXT NOT NULL,
    recorded_at TEXT NOT NULL
);
""",
}
READABLE_VERSIONS = (1, SCHEMA_VERSION)  # a read-only open also takes a version-1 ledger


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


@dataclass(frozen=True)
class PipelineRecord:
    number: int
    repo: str
    pr: int | None
    commit: str | None
    branch: str | None
    base_commit: str | None
    command: dict[str, Any]
    plan: dict[str, Any] | None
    catalog_digest: str | None
    gating: bool
    state: str
    started_at: str
    finished_at: str | None
    validated_by: int | None
    meta: dict[str, Any]
    results: list[StageResult] = field(default_factory=list)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)  # (stage, test id) -> text
    reused_tests: dict[str, list[str]] = field(default_factory=dict)  # stage -> test ids
    # (source pipeline, a post-merge one?, tests reused from it by key), by source
    key_reuses: list[tuple[int, bool, int]] = field(default_factory=list)
    # (family, test id, pipeline, source, detail) of the reuse faults found in this pipeline
    reuse_faults: list[tuple[str, str, int, int, str]] = field(default_factory=list)

    @property
    def planned(self) -> Plan | None:
        """The recorded Plan, read back typed; None for a pipeline recorded without one (a
        reuse-pipeline validation). PlanError when the stored plan is not a Plan."""
        return Plan.from_json(self.plan) if self.plan else None


@dataclass(frozen=True)
class RecordedKey:
    """A test's dependency key as its run recorded it (harness/reuse/dependency_key.py computes
    it)."""

    test_id: str
    family: str
    key: str  # the digest of the code parts (test, files, suite_args, catalog): the lookup
    parts: dict[str, str]  # each of the six parts -> its digest
    conservative: str | None  # why ``files`` is the whole repository's digest, or None
    test_file: str


@dataclass(frozen=True)
class KeyedPass:
    """A trusted pipeline's passed run of a test, with the key it ran under."""

    test_id: str
    key: str
    parts: dict[str, str]
    pipeline: int
    on_main: bool  # a post-merge pipeline of the default branch (else: this PR's own)
    duration_s: float


@dataclass(frozen=True)
class KeyRun:
    """The newest recorded key of a test: where it ran, how it ended, its parts and files."""

    pipeline: int
    pr: int | None
    branch: str | None
    stage: str
    family: str
    outcome: str
    key: str
    parts: dict[str, str]
    conservative: str | None
    test_file: str
    files: dict[str, str]  # {} when conservative (the whole repository's files are not kept)


def busy_timeout_s() -> float:
    """The busy timeout. Precedence: ``$STAGEBOT_LEDGER_BUSY_TIMEOUT`` > default (30 s)."""
    raw = os.environ.get(BUSY_TIMEOUT_ENV)
    try:
        return float(raw) if raw else DEFAULT_BUSY_TIMEOUT_S
    except ValueError:
        raise LedgerError(
            f"${BUSY_TIMEOUT_ENV}={raw!r} is not a number of seconds (e.g. 30)"
        ) from None


class Ledger:
    def __init__(self, connection: sqlite3.Connection, path: Path, readonly: bool, repo: str):
        self.connection = connection
        self.path = path
        self.readonly = readonly
        self.repo = repo
        self.version = SCHEMA_VERSION

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        readonly: bool = False,
        busy_timeout: float | None = None,
        repo: str = DEFAULT_REPO,
    ) -> Ledger:
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

    def __enter__(self) -> Ledger:
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

    # -- writing ---------------------------------------------------------------------------
    def start_pipeline(
        self,
        *,
        command: dict[str, Any],
        commit: str | None,
        plan: dict[str, Any] | None = None,
        pr: int | None = None,
        branch: str | None = None,
        base_commit: str | None = None,
        number: int | None = None,
        meta: dict[str, Any] | None = None,
        state: str = "RUNNING",
    ) -> int:
        """Record a new pipeline; returns its number (the next one, or ``number`` in Actions)."""
        with self._write() as db:
            if number is None:
                number = db.execute(
                    "SELECT COALESCE(MAX(number), 0) + 1 FROM pipelines WHERE repo = ?",
                    (self.repo,),
                ).fetchone()[0]
            elif db.execute(
                "SELECT 1 FROM pipelines WHERE repo = ? AND number = ?", (self.repo, number)
            ).fetchone():
                raise LedgerError(
                    f"ledger {self.path} already has pipeline #{number}; give a new number"
                )
            db.execute(
                "INSERT INTO pipelines (repo, number, pr, commit_id, branch, base_commit, command,"
                " plan, catalog_digest, gating, state, started_at, meta)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    self.repo,
                    number,
                    pr,
                    commit,
                    branch,
                    base_commit,
                    json.dumps(command),
                    json.dumps(plan) if plan is not None else None,
                    plan.get("catalog_digest") if plan else None,
                    int(bool(plan and plan.get("gating"))),
                    state,
                    _now(),
                    json.dumps(meta or {}),
                ),
            )
        return number

    def record_result(
        self,
        pipeline: int,
        result: StageResult,
        *,
        logs: dict[str, str] | None = None,
        reused_tests: dict[str, tuple[int, float]] | None = None,
        key_reused: dict[str, tuple[int, float]] | None = None,
        keys: Iterable[RecordedKey] = (),
        key_files: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        """Store one shard's StageResult and its tests (replacing an earlier record of it), in
        one transaction: a shard's tests and their keys are recorded together or not at all.

        ``reused_tests``: test id -> (pipeline it passed in, its duration), for tests skipped
        because they passed before on this commit; ``key_reused``: the same for tests skipped
        because their dependency key matched a trusted passed run (``reused_by`` 'key'). Both
        count as passed on this commit for the next reuse. ``keys``: the keys of the tests the
        shard ran, kept only for tests the result holds an outcome of (a test a crash cut off
        has none, so gets no key); ``key_files``: test file -> {file: digest} of those keys.
        """
        logs = logs or {}
        # SQLite refuses lone surrogates (bytes that were not UTF-8): store them as \xNN
        record = clean_json(result.to_json())
        finished = {t.test_id for t in result.tests}
        keys = [k for k in keys if k.test_id in finished]
        with self._write() as db:
            pid = self._id(pipeline)
            for table in ("tests", "test_keys"):
                db.execute(
                    f"DELETE FROM {table} WHERE pipeline_id = ? AND stage = ?", (pid, result.stage)
                )
            db.execute(
                "INSERT OR REPLACE INTO shards VALUES (?, ?, ?, ?, ?)",
                (pid, result.stage, result.state, result.duration_s, json.dumps(record)),
            )
            shard_reused = result.reused_from if result.state == "REUSED" else None
            rows = [
                (
                    pid,
                    result.stage,
                    clean(t.test_id),
                    t.outcome,
                    t.duration_s,
                    clean(t.evidence) if t.evidence is not None else None,
                    t.attempts,
                    shard_reused,
                    "commit" if shard_reused is not None else None,
                    clean(logs[t.test_id]) if logs.get(t.test_id) else None,
                )
                for t in result.tests
            ]
            for how, reused in (("commit", reused_tests), ("key", key_reused)):
                rows += [  # a test the shard ran keeps its own outcome, whatever was claimed
                    (pid, result.stage, test_id, "passed", duration, None, 1, source, how, None)
                    for test_id, (source, duration) in (reused or {}).items()
                    if test_id not in finished
                ]
            db.executemany(
                "INSERT OR REPLACE INTO tests (pipeline_id, stage, test_id, outcome, duration_s,"
                " evidence, attempts, reused_from, reused_by, log)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            db.executemany(
                "INSERT OR REPLACE INTO test_keys VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        pid,
                        result.stage,
                        clean(k.test_id),
                        k.family,
                        k.key,
                        json.dumps(k.parts, sort_keys=True),
                        k.conservative,
                        k.test_file,
                    )
                    for k in keys
                ],
            )
            wanted = {k.test_file for k in keys}
            db.executemany(
                "INSERT OR REPLACE INTO key_files VALUES (?, ?, ?)",
                [
                    (pid, name, zlib.compress(json.dumps(files, sort_keys=True).encode()))
                    for name, files in (key_files or {}).items()
                    if name in wanted
                ],
            )

    def record_split(self, pipeline: int, family: str, groups: list[list[str]]) -> None:
        """Record how ``family``'s tests were split into its shards in ``pipeline`` (shard i's
        test ids are ``groups[i - 1]``), so later pipelines on the same commit and catalog keep
        that split and a reused shard still means the same tests."""
        with self._write() as db:
            pid = self._id(pipeline)
            meta = json.loads(
                db.execute("SELECT meta FROM pipelines WHERE id = ?", (pid,)).fetchone()[0]
            )
            meta.setdefault("splits", {})[family] = [list(group) for group in groups]
            db.execute("UPDATE pipelines SET meta = ? WHERE id = ?", (json.dumps(meta), pid))

    def pinned_split(
        self, family: str, commit: str | None, catalog_digest: str, shards: int
    ) -> list[list[str]] | None:
        """The split of ``family`` recorded by the latest pipeline on ``commit`` with this
        catalog (digest) and shard count; None when there is none."""
        if commit is None:
            return None
        for row in self._query(
            "SELECT meta FROM pipelines WHERE repo = ? AND commit_id = ? AND catalog_digest = ?"
            " ORDER BY id DESC",
            (self.repo, commit, catalog_digest),
        ):
            groups = json.loads(row["meta"] or "{}").get("splits", {}).get(family)
            if isinstance(groups, list) and len(groups) == shards:
                return [list(group) for group in groups]
        return None

    def finish_pipeline(
        self, pipeline: int, state: str, meta: dict[str, Any] | None = None
    ) -> None:
        if state not in FINAL_STATES:
            raise ValueError(f"final state {state!r} is not one of {FINAL_STATES}")
        with self._write() as db:
            pid = self._id(pipeline)
            if meta is not None:
                old = json.loads(
                    db.execute("SELECT meta FROM pipelines WHERE id = ?", (pid,)).fetchone()[0]
                )
                db.execute(
                    "UPDATE pipelines SET meta = ? WHERE id = ?", (json.dumps({**old, **meta}), pid)
                )
            db.execute(
                "UPDATE pipelines SET state = ?, finished_at = ? WHERE id = ?", (state, _now(), pid)
            )

    def latest_validating(self, pr: int | None) -> int | None:
        """The newest successful gating pipeline (of ``pr``, when given) that is not itself a
        reuse-pipeline validation."""
        row = self._query_one(
            "SELECT number FROM pipelines WHERE repo = ? AND state = 'SUCCESS' AND gating = 1"
            " AND validated_by IS NULL AND (? IS NULL OR pr = ?) ORDER BY id DESC LIMIT 1",
            (self.repo, pr, pr),
        )
        return row["number"] if row is not None else None

    def record_validated(
        self, command: dict[str, Any], commit: str, source: int, *, pr=None, number=None
    ) -> int:
        """Record pipeline ``number`` (the next one when None) as SUCCESS at once, validated by
        pipeline ``source`` (`/bot reuse-pipeline`); returns its number."""
        number = self.start_pipeline(
            command=command,
            commit=commit,
            pr=pr,
            state="SUCCESS",
            number=number,
            meta={"validated_by": source},
        )
        with self._write() as db:
            db.execute(
                "UPDATE pipelines SET validated_by = ?, gating = 1, finished_at = started_at"
                " WHERE id = ?",
                (source, self._id(number)),
            )
        return number

    # -- reading ---------------------------------------------------------------------------
    def prior_shard(self, stage: str, commit: str, pipeline: int | None) -> PriorShard | None:
        """History: the shard's latest recorded result on ``commit`` (in ``pipeline`` if given)."""
        query = (
            "SELECT p.id, p.number, p.catalog_digest, s.state, s.result FROM shards s"
            " JOIN pipelines p ON p.id = s.pipeline_id"
            " WHERE p.repo = ? AND p.commit_id = ? AND s.stage = ?"
        )
        params: tuple = (self.repo, commit, stage)
        if pipeline is not None:
            query += " AND p.number = ?"
            params += (pipeline,)
        row = self._query_one(query + " ORDER BY p.id DESC LIMIT 1", params)
        if row is None:
            return None
        passed = [
            r["test_id"]
            for r in self._query(
                "SELECT test_id FROM tests WHERE pipeline_id = ? AND stage = ? AND outcome ="
                " 'passed' ORDER BY test_id",
                (row["id"], stage),
            )
        ]
        source = row["number"]
        if row["state"] == "REUSED":
            source = json.loads(row["result"]).get("reused_from") or source
        return PriorShard(source, row["state"], tuple(passed), row["catalog_digest"] or "")

    def durations(self, family: str) -> dict[str, float]:
        """The latest executed duration of each test of a stage family's shards, from shards that
        ran to the end (SUCCESS or FAILURE: an aborted or crashed shard ran only some tests)."""
        # "<family>" <= stage < "<family>." ('.' follows '-'): one range of the stage index
        # (tests drive the join); the exact family or "<family>-<n>" is picked below.
        rows = self._query(
            "SELECT t.stage, t.test_id, t.duration_s FROM tests t"
            " CROSS JOIN pipelines p ON p.id = t.pipeline_id"
            " JOIN shards s ON s.pipeline_id = t.pipeline_id AND s.stage = t.stage"
            " WHERE t.stage >= ? AND t.stage < ? AND p.repo = ?"
            " AND s.state IN ('SUCCESS', 'FAILURE')"
            " AND t.reused_from IS NULL AND t.outcome IN ('passed', 'failed', 'flaky')"
            " ORDER BY p.id",
            (family, family + ".", self.repo),
        )
        return {
            row["test_id"]: row["duration_s"]
            for row in rows
            if row["stage"] == family
            or (row["stage"].startswith(family + "-") and row["stage"][len(family) + 1 :].isdigit())
        }

    def shard_duration(self, stage: str) -> float | None:
        row = self._query_one(
            "SELECT s.duration_s FROM shards s JOIN pipelines p ON p.id = s.pipeline_id"
            " WHERE p.repo = ? AND s.stage = ? AND s.state IN ('SUCCESS', 'FAILURE')"
            " ORDER BY p.id DESC LIMIT 1",
            (self.repo, stage),
        )
        return row["duration_s"] if row else None

    def base_pipeline(
        self, base_commit: str | None, default_branch: str | None, exclude: int | None = None
    ) -> int | None:
        """The latest finished pipeline on ``base_commit``, else on ``default_branch``."""
        for column, value in (("commit_id", base_commit), ("branch", default_branch)):
            if not value:
                continue
            row = self._query_one(
                f"SELECT number FROM pipelines WHERE repo = ? AND {column} = ? AND state IN"
                " ('SUCCESS', 'FAILURE') AND validated_by IS NULL AND (? IS NULL OR number != ?)"
                " ORDER BY id DESC LIMIT 1",
                (self.repo, value, exclude, exclude),
            )
            if row is not None:
                return row["number"]
        return None

    def commits_starting_with(self, prefix: str) -> list[str]:
        """The commits of this ledger's pipelines that start with ``prefix`` (a dirty tree's
        identity, ``<sha>+dirty.<digest>``, counts as its ``<sha>``)."""
        rows = self._query(
            "SELECT DISTINCT commit_id FROM pipelines"
            " WHERE repo = ? AND substr(commit_id, 1, ?) = ?",
            (self.repo, len(prefix), prefix),
        )
        return sorted({row["commit_id"].partition("+")[0] for row in rows})

    def unknown_pipeline(self, number: int) -> str:
        """Why pipeline ``number`` cannot be used: the ledger lacks it; names the ones it has."""
        rows = self._query(
            "SELECT number FROM pipelines WHERE repo = ? ORDER BY number DESC LIMIT 11",
            (self.repo,),
        )
        have = [f"#{row['number']}" for row in rows]
        listing = (
            "it has none yet"
            if not have
            else f"it has {', '.join(have[:10])}{', …' if len(have) > 10 else ''}"
        )
        return f"pipeline #{number} is not in the ledger {self.path} ({listing})"

    def require_pipeline(self, number: int) -> None:
        """Raise UnknownPipelineError (naming the pipelines it has) when ``number`` is not here."""
        if self.pipeline(number, with_results=False) is None:
            raise UnknownPipelineError(self.unknown_pipeline(number))

    def latest_number(self) -> int | None:
        row = self._query_one("SELECT MAX(number) AS n FROM pipelines WHERE repo = ?", (self.repo,))
        return row["n"] if row else None

    def pipeline(self, number: int, *, with_results: bool = True) -> PipelineRecord | None:
        row = self._query_one(
            "SELECT * FROM pipelines WHERE repo = ? AND number = ?", (self.repo, number)
        )
        if row is None:
            return None
        results, logs, reused = [], {}, {}
        if with_results:
            for shard in self._query(
                "SELECT result FROM shards WHERE pipeline_id = ? ORDER BY rowid", (row["id"],)
            ):
                results.append(StageResult.from_json(json.loads(shard["result"])))
            for test in self._query(
                "SELECT stage, test_id, log, reused_from, outcome FROM tests WHERE pipeline_id = ?",
                (row["id"],),
            ):
                if test["log"]:
                    logs[(test["stage"], test["test_id"])] = test["log"]
                if test["reused_from"] is not None:
                    reused.setdefault(test["stage"], []).append(test["test_id"])
        return PipelineRecord(
            number=row["number"],
            repo=row["repo"],
            pr=row["pr"],
            commit=row["commit_id"],
            branch=row["branch"],
            base_commit=row["base_commit"],
            command=json.loads(row["command"]),
            plan=json.loads(row["plan"]) if row["plan"] else None,
            catalog_digest=row["catalog_digest"],
            gating=bool(row["gating"]),
            state=row["state"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            validated_by=row["validated_by"],
            meta=json.loads(row["meta"]),
            results=results,
            logs=logs,
            reused_tests=reused,
            key_reuses=self.key_reuse_sources(number) if with_results else [],
            reuse_faults=self.reuse_faults(number) if with_results else [],
        )

    def passed_tests(self, number: int, stage: str) -> dict[str, tuple[int, float]]:
        """Test id -> (pipeline it originally passed in, duration) for ``stage`` in ``number``."""
        return {
            row["test_id"]: (row["reused_from"] or number, row["duration_s"])
            for row in self._query(
                "SELECT t.test_id, t.reused_from, t.duration_s FROM tests t"
                " JOIN pipelines p ON p.id = t.pipeline_id"
                " WHERE p.repo = ? AND p.number = ? AND t.stage = ? AND t.outcome = 'passed'",
                (self.repo, number, stage),
            )
        }

    def trusted_passes(
        self,
        family: str,
        *,
        pr: int | None,
        branch: str | None,
        default_branch: str,
        exclude: int | None = None,
        test_id: str | None = None,
        source: int | None = None,
    ) -> dict[str, KeyedPass]:
        """Test id -> its latest keyed run in ``family`` that reuse by key may trust, when that
        run passed. The trust rule is in the query: a run counts only when its pipeline is a
        post-merge one of ``default_branch`` (no PR), or an earlier pipeline of the same ``pr``
        (without a PR, a local run: one of the same ``branch``); never another PR's, so a PR
        cannot plant a pass for anyone else. A test with a recorded reuse fault is never
        reused by key (``record_fault``). ``exclude``: the asking pipeline; ``source``: only
        the runs of that pipeline (to check a reuse that was offered earlier)."""
        if self.version < 2:
            return {}
        rows = self._query(
            "SELECT k.test_id, k.key, k.parts, p.number, p.pr, t.outcome, t.duration_s"
            " FROM test_keys k"
            " JOIN pipelines p ON p.id = k.pipeline_id"
            " JOIN tests t ON t.pipeline_id = k.pipeline_id AND t.stage = k.stage"
            " AND t.test_id = k.test_id"
            " WHERE k.family = ? AND p.repo = ? AND (? IS NULL OR k.test_id = ?)"
            " AND (? IS NULL OR p.number != ?) AND (? IS NULL OR p.number = ?)"
            " AND ((p.pr IS NULL AND p.branch = ?)"
            " OR (? IS NOT NULL AND p.pr = ?)"
            " OR (? IS NULL AND p.pr IS NULL AND p.branch IS ?))"
            " AND NOT EXISTS (SELECT 1 FROM reuse_faults f WHERE f.repo = p.repo"
            " AND f.family = k.family AND f.test_id = k.test_id)"
            " ORDER BY p.id",
            (family, self.repo, test_id, test_id, exclude, exclude, source, source, default_branch)
            + (pr, pr, pr, branch),
        )
        latest = {row["test_id"]: row for row in rows}  # the newest run of each test wins
        return {
            test: KeyedPass(
                test,
                row["key"],
                json.loads(row["parts"]),
                row["number"],
                row["pr"] is None,
                row["duration_s"],
            )
            for test, row in latest.items()
            if row["outcome"] == "passed"
        }

    def record_fault(
        self, family: str, test_id: str, pipeline: int, source: int, detail: str
    ) -> None:
        """A reuse fault: ``test_id`` was reused by key from ``source`` in ``pipeline``, and a
        real run disagreed (``detail``). The test is never reused by key again."""
        with self._write() as db:
            db.execute(
                "INSERT INTO reuse_faults (repo, family, test_id, pipeline, source, detail,"
                " recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (self.repo, family, clean(test_id), pipeline, source, clean(detail), _now()),
            )

    def key_reused(self, number: int) -> list[tuple[str, str, int]]:
        """(stage, test id, source pipeline) of each test pipeline ``number`` reused by key."""
        if self.version < 2:
            return []
        rows = self._query(
            "SELECT t.stage, t.test_id, t.reused_from FROM tests t"
            " JOIN pipelines p ON p.id = t.pipeline_id"
            " WHERE p.repo = ? AND p.number = ? AND t.reused_by = 'key'"
            " ORDER BY t.stage, t.test_id",
            (self.repo, number),
        )
        return [(r["stage"], r["test_id"], r["reused_from"]) for r in rows]

    def add_meta(self, number: int, key: str, item: Any) -> None:
        """Append ``item`` to the list ``meta[key]`` of pipeline ``number``."""
        with self._write() as db:
            pid = self._id(number)
            meta = json.loads(
                db.execute("SELECT meta FROM pipelines WHERE id = ?", (pid,)).fetchone()[0]
            )
            meta.setdefault(key, []).append(item)
            db.execute("UPDATE pipelines SET meta = ? WHERE id = ?", (json.dumps(meta), pid))

    def reuse_faults(self, pipeline: int | None = None) -> list[tuple[str, str, int, int, str]]:
        """(family, test id, pipeline, source, detail) of each recorded reuse fault (of the
        reuses in ``pipeline`` when given), oldest first."""
        if self.version < 2:
            return []
        rows = self._query(
            "SELECT family, test_id, pipeline, source, detail FROM reuse_faults"
            " WHERE repo = ? AND (? IS NULL OR pipeline = ?) ORDER BY id",
            (self.repo, pipeline, pipeline),
        )
        return [(r["family"], r["test_id"], r["pipeline"], r["source"], r["detail"]) for r in rows]

    def latest_key(self, test_id: str) -> KeyRun | None:
        """The newest recorded key of ``test_id`` (any family and pipeline), with its files."""
        if self.version < 2:
            return None
        row = self._query_one(
            "SELECT k.*, p.number, p.pr, p.branch, t.outcome, f.files FROM test_keys k"
            " JOIN pipelines p ON p.id = k.pipeline_id"
            " JOIN tests t ON t.pipeline_id = k.pipeline_id AND t.stage = k.stage"
            " AND t.test_id = k.test_id"
            " LEFT JOIN key_files f ON f.pipeline_id = k.pipeline_id AND f.test_file = k.test_file"
            " WHERE p.repo = ? AND k.test_id = ? ORDER BY p.id DESC LIMIT 1",
            (self.repo, test_id),
        )
        if row is None:
            return None
        return KeyRun(
            pipeline=row["number"],
            pr=row["pr"],
            branch=row["branch"],
            stage=row["stage"],
            family=row["family"],
            outcome=row["outcome"],
            key=row["key"],
            parts=json.loads(row["parts"]),
            conservative=row["conservative"],
            test_file=row["test_file"],
            files=json.loads(zlib.decompress(row["files"])) if row["files"] else {},
        )

    def key_reuse_sources(self, number: int) -> list[tuple[int, bool, int]]:
        """(source pipeline, whether it is main's rather than the same PR's (or, without a PR,
        the same branch's), tests reused from it by key) of pipeline ``number``, by source. A
        source this ledger lacks is main's: in Actions a PR's ledger holds its own pipelines,
        main's post-merge ones are in main's ledger."""
        if self.version < 2:
            return []
        rows = self._query(
            "SELECT t.reused_from AS source, COUNT(*) AS n,"
            " s.id IS NULL OR NOT ((s.pr IS NOT NULL AND s.pr IS p.pr)"
            " OR (p.pr IS NULL AND s.pr IS NULL AND s.branch IS p.branch)) AS on_main"
            " FROM tests t"
            " JOIN pipelines p ON p.id = t.pipeline_id"
            " LEFT JOIN pipelines s ON s.repo = p.repo AND s.number = t.reused_from"
            " WHERE p.repo = ? AND p.number = ? AND t.reused_by = 'key'"
            " GROUP BY t.reused_from ORDER BY t.reused_from",
            (self.repo, number),
        )
        return [(row["source"], bool(row["on_main"]), row["n"]) for row in rows]

    def test_outcomes(self, number: int) -> dict[tuple[str, str], TestOutcome]:
        """(stage family, test id) -> outcome in pipeline ``number`` (executed or reused), for
        base comparison: like with like, since one node id runs in several stage families (CPU,
        A10, H200 …) with different backends."""
        row = self._query_one(
            "SELECT id FROM pipelines WHERE repo = ? AND number = ?", (self.repo, number)
        )
        if row is None:
            return {}
        outcomes: dict[tuple[str, str], TestOutcome] = {}
        for r in self._query(
            "SELECT stage, test_id, outcome, duration_s, evidence, attempts FROM tests"
            " WHERE pipeline_id = ? ORDER BY stage",
            (row["id"],),
        ):
            key = (stage_family(r["stage"]), r["test_id"])
            test = TestOutcome(
                r["test_id"], r["outcome"], r["duration_s"], r["evidence"], r["attempts"]
            )
            if key not in outcomes or test.outcome in ("failed", "error"):
                outcomes[key] = test  # two shards of one family: a failure wins
        return outcomes

    def test_history(
        self, branch: str, *, test_id: str | None = None, last: int = HISTORY_PIPELINES
    ) -> list[tuple[int, str, str, str, str, int]]:
        """(pipeline, commit, stage, test id, outcome, attempts) of the latest ``last`` finished
        pipelines on ``branch`` (one test id, or a prefix of ids ending at ``::``), newest
        first; reused results are left out (they were not run there)."""
        rows = self._query(
            "SELECT p.number, p.commit_id, t.stage, t.test_id, t.outcome, t.attempts"
            " FROM tests t JOIN pipelines p ON p.id = t.pipeline_id"
            " WHERE p.id IN (SELECT id FROM pipelines WHERE repo = ? AND branch = ? AND state IN"
            " ('SUCCESS', 'FAILURE') ORDER BY id DESC LIMIT ?)"
            " AND t.reused_from IS NULL AND (? IS NULL OR t.test_id = ? OR t.test_id LIKE ?)"
            " ORDER BY p.id DESC, t.stage, t.test_id",
            (self.repo, branch, last, test_id, test_id, f"{test_id}::%"),
        )
        return [
            (
                r["number"],
                r["commit_id"] or "",
                r["stage"],
                r["test_id"],
                r["outcome"],
                r["attempts"],
            )
            for r in rows
        ]

    def failure_evidence(
        self, branch: str, last: int = HISTORY_PIPELINES
    ) -> list[tuple[int, str, str, str, str]]:
        """(pipeline, stage, test id, outcome, evidence) of each flaky, failed or erroring test
        with evidence in the latest ``last`` finished pipelines on ``branch``, oldest first."""
        rows = self._query(
            "SELECT p.number, t.stage, t.test_id, t.outcome, t.evidence"
            " FROM tests t JOIN pipelines p ON p.id = t.pipeline_id"
            " WHERE p.id IN (SELECT id FROM pipelines WHERE repo = ? AND branch = ? AND state IN"
            " ('SUCCESS', 'FAILURE') ORDER BY id DESC LIMIT ?)"
            " AND t.outcome IN ('flaky', 'failed', 'error') AND t.evidence IS NOT NULL"
            " ORDER BY p.id",
            (self.repo, branch, last),
        )
        return [(r["number"], r["stage"], r["test_id"], r["outcome"], r["evidence"]) for r in rows]

    # -- helpers ---------------------------------------------------------------------------
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


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
