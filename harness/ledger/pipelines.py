"""What the ledger keeps of pipelines: each one's command, plan, commit and state, its splits,
the validations, and the history the planner and the base selection read."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from stagebot.harness.ledger.keys import Keys
from stagebot.harness.ledger.store import LedgerError, UnknownPipelineError, now
from stagebot.harness.results import StageResult
from stagebot.stages.history import PriorShard
from stagebot.stages.plan import Plan

FINAL_STATES = ("SUCCESS", "FAILURE", "ABORTED", "NOT_RUN")


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
    # stage -> the recorded durations of its reused tests, summed (what reuse saved)
    reused_seconds: dict[str, float] = field(default_factory=dict)
    # (source pipeline, a post-merge one?, tests reused from it by key), by source
    key_reuses: list[tuple[int, bool, int]] = field(default_factory=list)
    # (family, test id, pipeline, source, detail) of the reuse faults found in this pipeline
    reuse_faults: list[tuple[str, str, int, int, str]] = field(default_factory=list)

    @property
    def planned(self) -> Plan | None:
        """The recorded Plan, read back typed; None for a pipeline recorded without one (a
        reuse-pipeline validation). PlanError when the stored plan is not a Plan."""
        return Plan.from_json(self.plan) if self.plan else None


class Pipelines(Keys):
    """The ``pipelines`` table (a pipeline's record carries its reuses by key, so it reads the
    keys' tables too)."""

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
                    now(),
                    json.dumps(meta or {}),
                ),
            )
        return number

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
                "UPDATE pipelines SET state = ?, finished_at = ? WHERE id = ?", (state, now(), pid)
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

    def add_meta(self, number: int, key: str, item: Any) -> None:
        """Append ``item`` to the list ``meta[key]`` of pipeline ``number``."""
        with self._write() as db:
            pid = self._id(number)
            meta = json.loads(
                db.execute("SELECT meta FROM pipelines WHERE id = ?", (pid,)).fetchone()[0]
            )
            meta.setdefault(key, []).append(item)
            db.execute("UPDATE pipelines SET meta = ? WHERE id = ?", (json.dumps(meta), pid))

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
        source, result = row["number"], json.loads(row["result"])
        if row["state"] == "REUSED":  # the environment is the one of the run it reused
            source = result.get("reused_from") or source
            ran = self._query_one(
                "SELECT s.result FROM shards s JOIN pipelines p ON p.id = s.pipeline_id"
                " WHERE p.repo = ? AND p.number = ? AND s.stage = ?",
                (self.repo, source, stage),
            )
            result = json.loads(ran["result"]) if ran is not None else {}
        environment = result.get("environment")
        return PriorShard(
            source,
            row["state"],
            tuple(passed),
            row["catalog_digest"] or "",
            tuple(environment) if environment is not None else None,
        )

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

    def gpu_minutes_by_day(self, branch: str) -> dict[tuple[str, str], dict[str, float]]:
        """(day, GPU type) -> the GPU-minutes (run, reused, cancelled) ``branch``'s finished
        pipelines recorded when they finished (``meta["gpu_minutes"]``), summed; the day is
        the UTC date the pipeline started."""
        sums: dict[tuple[str, str], dict[str, float]] = {}
        for row in self._query(
            "SELECT started_at, meta FROM pipelines WHERE repo = ? AND branch = ?"
            f" AND state IN ({', '.join('?' * len(FINAL_STATES))}) ORDER BY id",
            (self.repo, branch, *FINAL_STATES),
        ):
            for gpu_type, figures in (json.loads(row["meta"]).get("gpu_minutes") or {}).items():
                day = sums.setdefault((row["started_at"][:10], gpu_type), {})
                for name, minutes in figures.items():
                    day[name] = day.get(name, 0.0) + minutes
        return sums

    def shard_duration(self, stage: str) -> float | None:
        row = self._query_one(
            "SELECT s.duration_s FROM shards s JOIN pipelines p ON p.id = s.pipeline_id"
            " WHERE p.repo = ? AND s.stage = ? AND s.state IN ('SUCCESS', 'FAILURE')"
            " ORDER BY p.id DESC LIMIT 1",
            (self.repo, stage),
        )
        return row["duration_s"] if row else None

    def base_pipeline(
        self,
        base_commit: str | None,
        default_branch: str | None,
        exclude: int | None = None,
        *,
        before: int | None = None,
        not_commit: str | None = None,
    ) -> int | None:
        """The latest finished pipeline on ``base_commit``, else on ``default_branch``; never
        ``exclude``, one numbered ``before`` or later, nor one on ``not_commit`` (the commit
        under test)."""
        for column, value in (("commit_id", base_commit), ("branch", default_branch)):
            if not value:
                continue
            row = self._query_one(
                f"SELECT number FROM pipelines WHERE repo = ? AND {column} = ? AND state IN"
                " ('SUCCESS', 'FAILURE', 'NOT_RUN') AND validated_by IS NULL"
                " AND (? IS NULL OR number != ?) AND (? IS NULL OR number < ?)"
                " AND (? IS NULL OR commit_id IS NOT ?)"
                " ORDER BY id DESC LIMIT 1",
                (self.repo, value, exclude, exclude, before, before) + (not_commit, not_commit),
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
        results, logs, reused, saved = [], {}, {}, {}
        if with_results:
            for shard in self._query(
                "SELECT result FROM shards WHERE pipeline_id = ? ORDER BY rowid", (row["id"],)
            ):
                results.append(StageResult.from_json(json.loads(shard["result"])))
            for test in self._query(
                "SELECT stage, test_id, log, reused_from, duration_s FROM tests"
                " WHERE pipeline_id = ?",
                (row["id"],),
            ):
                if test["log"]:
                    logs[(test["stage"], test["test_id"])] = test["log"]
                if test["reused_from"] is not None:
                    reused.setdefault(test["stage"], []).append(test["test_id"])
                    saved[test["stage"]] = saved.get(test["stage"], 0.0) + test["duration_s"]
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
            reused_seconds=saved,
            key_reuses=self.key_reuse_sources(number) if with_results else [],
            reuse_faults=self.reuse_faults(number) if with_results else [],
        )
