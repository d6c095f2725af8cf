"""The StageResult contract: one shard's outcome (schema: harness/schemas/stage_result.v1.json).

Written by whoever runs a shard (locally or in a CI fan-out job) as ``result.json``, read by the
ledger and the report. Plain data, JSON round-trip.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from stagebot.bot.errors import StagebotError

STAGE_RESULT_VERSION = 1
STATES = ("SUCCESS", "FAILURE", "ERROR", "ABORTED", "NOT_RUN", "REUSED")
# xfailed: ran and failed as its xfail mark expects; never counted (or reused) as passed.
TEST_OUTCOMES = ("passed", "failed", "error", "skipped", "waived", "flaky", "xfailed")


class ResultError(StagebotError):
    """A StageResult file that cannot be read."""


@dataclass(frozen=True)
class TestOutcome:
    test_id: str
    outcome: str  # one of TEST_OUTCOMES
    duration_s: float
    evidence: str | None = None  # the real error line, for failures
    attempts: int = 1


@dataclass(frozen=True)
class StageResult:
    stage: str
    shard: int
    shards: int
    state: str  # one of STATES
    started_at: str | None  # ISO 8601, UTC
    finished_at: str | None
    duration_s: float
    gpu_type: str
    gpus: list[str]  # the device ids it ran on
    tests: list[TestOutcome] = field(default_factory=list)
    log_path: str | None = None
    evidence: str | None = None  # why the shard as a whole ended so (timeout, crash, NOT_RUN why)
    reused_from: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"version": STAGE_RESULT_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StageResult:
        if not isinstance(data, dict) or data.get("version") != STAGE_RESULT_VERSION:
            raise ResultError(f"unsupported StageResult version; expected {STAGE_RESULT_VERSION}")
        try:
            values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
            values["tests"] = [TestOutcome(**test) for test in data.get("tests", [])]
            result = cls(**values)
        except TypeError as error:
            raise ResultError(f"StageResult for {data.get('stage')!r}: {error}") from None
        if result.state not in STATES:
            raise ResultError(f"StageResult state {result.state!r} is not one of {STATES}")
        return result
