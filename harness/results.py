"""The StageResult contract: one shard's outcome (schema: harness/schemas/stage_result.v1.json).

Written by whoever runs a shard (locally or in a CI fan-out job) as ``result.json``, read by the
ledger and the report. Plain data, JSON round-trip.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from stagebot.harness.decoding import clean_json
from stagebot.stages.errors import StagebotError

STAGE_RESULT_VERSION = 1
STATES = ("SUCCESS", "FAILURE", "ERROR", "ABORTED", "NOT_RUN", "REUSED")
# xfailed: ran and failed as its xfail mark expects; never counted (or reused) as passed.
TEST_OUTCOMES = ("passed", "failed", "error", "skipped", "waived", "flaky", "xfailed")
# The test id of a suite's own verdict: pytest exited 1 with no failed test (a failing item).
SESSION_ID = "(pytest session)"
FAIL_FAST = "cancelled by fail-fast"  # how the evidence of a shard fail-fast cancelled begins


def fail_fast_evidence(why: str) -> str:
    """The evidence of a shard fail-fast cancelled because of ``why`` (locally and on GitHub)."""
    return f"{FAIL_FAST}: {why} (--disable-fail-fast runs every stage)"


def environment_lines(
    python: str,
    platform: str,
    gpu: tuple[str, str],
    distributions: Iterable[tuple[str, str]],
) -> list[str]:
    """A StageResult's ``environment``: ``python 3.11.7``, ``platform Linux-x86_64``, ``gpu
    <type> driver <version>``, then ``<name>==<version>`` per installed distribution."""
    gpu_type, gpu_driver = gpu
    return [
        f"python {python}",
        f"platform {platform}",
        f"gpu {gpu_type} driver {gpu_driver}",
        *(f"{name}=={version}" for name, version in distributions),
    ]


def environment_items(lines: Iterable[str]) -> dict[str, str]:
    """What `environment_lines` wrote: ``python``, ``platform`` and ``gpu`` (ENVIRONMENT_META)
    and each distribution's name -> its value."""
    pairs = (line.partition("==")[::2] if "==" in line else line.split(" ", 1) for line in lines)
    return {name: value for name, value in pairs}


ENVIRONMENT_META = ("python", "platform", "gpu")  # the items of it that are no distribution


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
    # where it ran: Python, platform, GPU and every installed distribution (environment_lines)
    environment: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"version": STAGE_RESULT_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StageResult:
        """Read a result.json: every field's type, enum and bound is checked (the schema's
        rules), because the file comes from a stage job, which runs the PR's code."""
        if not isinstance(data, dict) or data.get("version") != STAGE_RESULT_VERSION:
            raise ResultError(f"unsupported StageResult version; expected {STAGE_RESULT_VERSION}")
        data = clean_json(data)  # a result.json read with surrogates (not UTF-8) in it
        where = (
            f"StageResult for {data.get('stage')!r}"
            if isinstance(data.get("stage"), str)
            else "StageResult"
        )
        _check_fields(where, data, RESULT_FIELDS, required=REQUIRED)
        tests = data.get("tests", [])
        for index, test in enumerate(tests):
            if not isinstance(test, dict):
                raise ResultError(f"{where}: tests[{index}] is {_kind(test)}, not an object")
            _check_fields(f"{where}: tests[{index}]", test, TEST_FIELDS, required=TEST_REQUIRED)
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values["tests"] = [TestOutcome(**test) for test in tests]
        result = cls(**values)
        if result.shard > result.shards:
            raise ResultError(f"{where}: shard {result.shard} is beyond shards {result.shards}")
        return result


# field -> (allowed JSON kinds, enum or None); "int" excludes booleans, "number" takes ints too
RESULT_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...] | None]] = {
    "version": (("int",), None),
    "stage": (("str",), None),
    "shard": (("int",), None),
    "shards": (("int",), None),
    "state": (("str",), STATES),
    "started_at": (("str", "null"), None),
    "finished_at": (("str", "null"), None),
    "duration_s": (("number",), None),
    "gpu_type": (("str",), None),
    "gpus": (("list[str]",), None),
    "tests": (("list",), None),
    "log_path": (("str", "null"), None),
    "evidence": (("str", "null"), None),
    "reused_from": (("int", "null"), None),
    "environment": (("list[str]", "null"), None),
}
REQUIRED = ("stage", "shard", "shards", "state", "duration_s", "gpu_type", "gpus")
TEST_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...] | None]] = {
    "test_id": (("str",), None),
    "outcome": (("str",), TEST_OUTCOMES),
    "duration_s": (("number",), None),
    "evidence": (("str", "null"), None),
    "attempts": (("int",), None),
}
TEST_REQUIRED = ("test_id", "outcome", "duration_s")
POSITIVE = ("shard", "shards", "attempts")
NON_EMPTY = ("stage", "test_id")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _is(value: object, kind: str) -> bool:
    if kind == "null":
        return value is None
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list)
    return isinstance(value, list) and all(isinstance(item, str) for item in value)  # list[str]


def _check_fields(where: str, data: dict[str, Any], spec, *, required: tuple[str, ...]) -> None:
    unknown = sorted(set(data) - set(spec))
    if unknown:
        raise ResultError(f"{where}: unknown field(s) {unknown}; expected {sorted(spec)}")
    missing = [name for name in required if name not in data]
    if missing:
        raise ResultError(f"{where}: missing field(s) {missing}")
    for name, value in data.items():
        kinds, choices = spec[name]
        if not any(_is(value, kind) for kind in kinds):
            wanted = " or ".join(kinds)
            raise ResultError(f"{where}: {name} is {_kind(value)}, expected {wanted}")
        if choices is not None and value not in choices:
            raise ResultError(f"{where}: {name} {value!r} is not one of {choices}")
        if name in POSITIVE and value < 1:
            raise ResultError(f"{where}: {name} is {value}, expected at least 1")
        if name == "duration_s" and value < 0:
            raise ResultError(f"{where}: duration_s is {value}, expected at least 0")
        if name in NON_EMPTY and not value.strip():
            raise ResultError(f"{where}: {name} is empty")
