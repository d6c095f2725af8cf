"""The ledger's SQLite schema and its migrations: what each table keeps, by version.

Version 2 adds the dependency keys (docs/reuse.md): ``test_keys`` (one row per test a shard ran
to an outcome: its key, its six parts' digests, why it is conservative), ``key_files`` (per
pipeline and test file, the digests of the files the key read), ``reuse_faults`` and
``tests.reused_by`` ('commit' | 'key', beside ``reused_from``). A version-1 ledger is migrated
when opened for writing (``MIGRATIONS``) and read as it is when opened read-only.
"""

from __future__ import annotations

SCHEMA_VERSION = 2
LEDGER_TABLES = {"pipelines", "shards", "tests"}
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
