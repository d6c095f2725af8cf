"""What the ledger keeps of reuse by dependency key (docs/reuse.md): each test's recorded key and
files, the passed runs reuse may trust, the tests a pipeline reused by key, the reuse faults."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass

from stagebot.harness.decoding import clean
from stagebot.harness.ledger.store import Store, now


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


class Keys(Store):
    """The dependency keys' tables: ``test_keys``, ``key_files``, ``reuse_faults``."""

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
                (self.repo, family, clean(test_id), pipeline, source, clean(detail), now()),
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
