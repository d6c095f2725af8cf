"""The Plan and matrix-entry contracts (schemas: stages/schemas/plan.v1.json, matrix_entry.v1.json).

A Plan is what the planner decided, step by step, with reasons; a matrix entry is everything one
CI fan-out job needs to run one shard without the ledger. Both are plain data that round-trip
through JSON, so each step of the pipeline can run in another process or on another machine.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from stagebot.stages.command import Command
from stagebot.stages.errors import PlanError

DEFAULT_MAX_RERUNS = 2  # a failed test is re-run at most twice (FLAKY if it then passes)...
DEFAULT_RERUN_MAX_FAILURES = 5  # ...and only when at most 5 tests of the shard failed

PLAN_VERSION = 1
MATRIX_ENTRY_VERSION = 1
ACTIONS = ("run", "reuse", "skip")


@dataclass(frozen=True)
class Step:
    """One selection step: what it added or removed, and why."""

    step: str
    reason: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PlannedShard:
    stage: str
    family: str
    kind: str
    shard: int
    shards: int
    gpu_type: str
    gpu_count: int
    nodes: int
    backend: str | None
    phase: str
    timeout_minutes: int
    suites: list[dict[str, Any]]
    command: str | None
    selected_by: str  # e.g. "default", "--stage-list", "--extra-stage", "run_if_changed"
    explicit: bool  # named by the user (exactly or by a pattern)
    action: str  # run | reuse | skip
    reason: str
    reuse_from: int | None = None
    reused_tests: list[str] = field(default_factory=list)
    max_reruns: int = DEFAULT_MAX_RERUNS
    rerun_max_failures: int = DEFAULT_RERUN_MAX_FAILURES


@dataclass(frozen=True)
class Plan:
    command: dict[str, Any]
    commit: str | None
    pr: int | None
    changed_files: list[str] | None  # None: unknown, treated as "everything changed"
    catalog_digest: str
    steps: list[Step]
    shards: list[PlannedShard]
    gating: bool  # may set the PR's gating status (covers the whole default selection)
    partly_tested_reason: str | None
    needs_approval: bool
    approval_reasons: list[str]
    notes: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"version": PLAN_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        """The Plan ``to_json`` wrote; PlanError naming what it lacks otherwise."""
        _check_version("Plan", data, PLAN_VERSION)
        values = _fields_of(cls, data, "Plan")
        values["steps"] = [
            _fields_of(Step, step, "Plan step", build=True) for step in data["steps"]
        ]
        values["shards"] = [
            _fields_of(PlannedShard, shard, "planned shard", build=True) for shard in data["shards"]
        ]
        return cls(**values)

    def shards_to(self, action: str) -> list[PlannedShard]:
        return [shard for shard in self.shards if shard.action == action]

    def parsed_command(self) -> Command:
        """The Command this plan plans (a `/bot run`), read back from its JSON."""
        return Command.from_json(self.command)


@dataclass(frozen=True)
class MatrixEntry:
    pipeline: int
    commit: str | None
    pr: int | None
    stage: str
    shard: int
    shards: int
    kind: str
    gpu_type: str
    gpu_count: int
    runner_labels: list[str]
    timeout_minutes: int
    suites: list[dict[str, Any]]
    command: str | None
    tests: list[str]  # exact test ids to run; empty: every test of the shard's suites
    reused_tests: list[str]  # test ids that passed before and are deselected
    reuse_from: int | None
    waives: list[dict[str, str]]  # {"test_id", "reason"} for this GPU type
    catalog_digest: str
    detailed_log: bool = False
    debug: bool = False
    # The GPU type's device-name patterns (fnmatch), so the job can tell which of its host's GPUs
    # serve the shard without a catalog; empty for CPU (and in entries written before it).
    device_names: list[str] = field(default_factory=list)
    max_reruns: int = DEFAULT_MAX_RERUNS  # the family's rerun policy (defaults: older entries)
    rerun_max_failures: int = DEFAULT_RERUN_MAX_FAILURES
    # What the job installs and sets before the shard (stages/setup.py: extras, install, env),
    # merged from the catalog; `bot stage-setup` runs it. Empty in entries written before it.
    setup: dict[str, Any] = field(default_factory=lambda: {"extras": [], "install": [], "env": {}})
    # Reuse by dependency key (harness/reuse/offers.py): the family's key inputs and the trusted
    # passed runs the runner may reuse; empty: no key is computed.
    key_reuse: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"version": MATRIX_ENTRY_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MatrixEntry:
        _check_version("matrix entry", data, MATRIX_ENTRY_VERSION)
        return _fields_of(cls, data, "matrix entry", build=True)


def _fields_of(cls, data: Any, what: str, build: bool = False):
    """``data``'s values of ``cls``'s fields (the dataclass itself with ``build``): every field
    without a default must be there (older writers may leave defaulted ones out)."""
    if not isinstance(data, dict):
        raise PlanError(f"{what} is {type(data).__name__}, not a JSON object")
    known = {f.name: f for f in fields(cls)}
    required = [
        name
        for name, f in known.items()
        if f.default is MISSING and f.default_factory is MISSING  # type: ignore[misc]
    ]
    missing = sorted(name for name in required if name not in data)
    if missing:
        raise PlanError(f"{what} lacks {', '.join(missing)}")
    values = {name: data[name] for name in known if name in data}
    return cls(**values) if build else values


def _check_version(what: str, data: Any, version: int) -> None:
    if not isinstance(data, dict) or data.get("version") != version:
        got = data.get("version") if isinstance(data, dict) else type(data).__name__
        raise PlanError(f"unsupported {what} version {got!r}; expected {version}")
