"""What the ledger keeps of tests: each shard's StageResult and its tests' outcomes (run or
reused, with their keys), read back for reuse, base comparison and flaky history."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping

from stagebot.harness.decoding import clean, clean_json
from stagebot.harness.ledger.keys import RecordedKey
from stagebot.harness.ledger.store import Store
from stagebot.harness.results import StageResult, TestOutcome
from stagebot.stages.names import stage_family

HISTORY_PIPELINES = 20  # how far back main's flaky history looks
# only the pipelines before a given one: the history that pipeline was judged with
_BEFORE = "AND (? IS NULL OR number < ?)"


class Tests(Store):
    """The ``shards`` and ``tests`` tables: what each shard ran and how each test ended."""

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
        self,
        branch: str,
        *,
        test_id: str | None = None,
        last: int = HISTORY_PIPELINES,
        before: int | None = None,
    ) -> list[tuple[int, str, str, str, str, int]]:
        """(pipeline, commit, stage, test id, outcome, attempts) of the latest ``last`` finished
        pipelines on ``branch`` (numbered below ``before`` when given: the history a pipeline
        was judged with), one test id or a prefix of ids ending at ``::``, newest first; reused
        results are left out (they were not run there)."""
        rows = self._query(
            "SELECT p.number, p.commit_id, t.stage, t.test_id, t.outcome, t.attempts"
            " FROM tests t JOIN pipelines p ON p.id = t.pipeline_id"
            " WHERE p.id IN (SELECT id FROM pipelines WHERE repo = ? AND branch = ? AND state IN"
            f" ('SUCCESS', 'FAILURE', 'NOT_RUN') {_BEFORE} ORDER BY id DESC LIMIT ?)"
            " AND t.reused_from IS NULL AND (? IS NULL OR t.test_id = ? OR t.test_id LIKE ?)"
            " ORDER BY p.id DESC, t.stage, t.test_id",
            (self.repo, branch, before, before, last, test_id, test_id, f"{test_id}::%"),
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
        self, branch: str, last: int = HISTORY_PIPELINES, before: int | None = None
    ) -> list[tuple[int, str, str, str, str]]:
        """(pipeline, stage, test id, outcome, evidence) of each flaky, failed or erroring test
        with evidence in the latest ``last`` finished pipelines on ``branch`` (numbered below
        ``before`` when given), oldest first."""
        rows = self._query(
            "SELECT p.number, t.stage, t.test_id, t.outcome, t.evidence"
            " FROM tests t JOIN pipelines p ON p.id = t.pipeline_id"
            " WHERE p.id IN (SELECT id FROM pipelines WHERE repo = ? AND branch = ? AND state IN"
            f" ('SUCCESS', 'FAILURE', 'NOT_RUN') {_BEFORE} ORDER BY id DESC LIMIT ?)"
            " AND t.outcome IN ('flaky', 'failed', 'error') AND t.evidence IS NOT NULL"
            " ORDER BY p.id",
            (self.repo, branch, before, before, last),
        )
        return [(r["number"], r["stage"], r["test_id"], r["outcome"], r["evidence"]) for r in rows]
