"""The stage jobs' results, taken into the ledger against the plan (the Actions report job).

A result is accepted only as ``<folder>/<planned stage>/result.json``, schema-valid, naming the
stage and shard of its folder: the files come from stage jobs, which run PR code, so any other
file (an extra stage, a second copy at another depth, a file claiming another shard) is ignored
and named in the report, never merged in. A planned shard without an accepted result is still
recorded: ERROR with the evidence (an unreadable file costs only its shard), or ABORTED when
the run was cancelled (with why: ``aborted``, e.g. fail-fast). Shards the plan reuses are
recorded REUSED. A partial report takes in only the stages that have finished (``only``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from stagebot.harness.results import ResultError, StageResult
from stagebot.harness.reuse.offers import read_keys, with_refusals
from stagebot.harness.run.recording import (
    failure_logs,
    passed_tests,
    record_result,
    reused_result,
)
from stagebot.harness.run.shard import placeholder_result
from stagebot.stages.errors import StagebotError
from stagebot.stages.plan import Plan, PlannedShard

NO_RESULT = (
    "the stage job left no result.json (it failed before writing one or its runner was lost); "
    "see the workflow run's log"
)
CANCELLED = "cancelled before this stage finished"


def record_stage_results(
    book,
    number: int,
    plan: Plan,
    folder: Path,
    *,
    cancelled: bool,
    unreadable: Mapping[str, str] | None = None,
    aborted: Mapping[str, str] | None = None,
    only: set[str] | None = None,
    default_branch: str = "main",
    main_book=None,
) -> list[str]:
    """Record each planned shard's result from ``folder`` (only the stages in ``only``, when
    given); returns the result files ignored. ``unreadable``: stage -> why its result artifact
    could not be downloaded or read; ``aborted``: stage -> why its run was cancelled (a shard
    left without a result, or whose own file says SUCCESS or ABORTED, is then ABORTED with that
    evidence). A shard's
    ``keys.json`` (harness/reuse/offers.py) brings its tests' keys and the tests it reused by key,
    each reuse checked against the ledger's trusted lookup for this pipeline (in ``main_book``,
    main's vouched ledger, too)."""
    unreadable = unreadable or {}
    accepted = {result_file(folder, shard) for shard in plan.shards_to("run")}
    ignored = [
        f"{path.relative_to(folder)} (not the result.json of a planned shard)"
        for path in (sorted(folder.rglob("result.json")) if folder.exists() else [])
        if path not in accepted
    ]
    for shard in plan.shards:  # in the plan's order
        if only is not None and shard.stage not in only:
            continue
        if shard.action == "reuse":
            passed = passed_tests(book, shard.stage, shard.reuse_from)
            record_result(book, number, reused_result(shard), reused=passed)
        elif shard.action == "run":
            where = (default_branch, main_book)
            run_cancelled = (aborted or {}).get(shard.stage)
            why_aborted = run_cancelled or (CANCELLED if cancelled else None)
            _record_run(book, number, folder, shard, why_aborted, unreadable, where, run_cancelled)
    return ignored


def _record_run(
    book,
    number: int,
    folder: Path,
    shard: PlannedShard,
    aborted: str | None,
    unreadable: Mapping[str, str],
    where: tuple,
    run_cancelled: str | None,
) -> None:
    result, logs = _taken(folder, shard)
    keyed = (
        read_keys(folder / shard.stage, shard.stage, book, number, *where)
        if result is not None
        else None
    )
    if result is not None and run_cancelled and result.state in ("SUCCESS", "ABORTED"):
        # GitHub concluded its run cancelled (fail-fast's or not): whatever the stage job's
        # own file says, never a pass, and the reason is the cancel's
        result = replace(result, state="ABORTED", evidence=run_cancelled)
    if result is None and shard.stage in unreadable:
        result = placeholder_result(shard, "ERROR", unreadable[shard.stage])
    if result is None:
        result = (
            placeholder_result(shard, "ABORTED", aborted)
            if aborted
            else placeholder_result(shard, "ERROR", NO_RESULT)
        )
    reused = passed_tests(book, shard.stage, shard.reuse_from) if shard.reused_tests else None
    result = with_refusals(result, keyed)
    record_result(book, number, result, logs=logs, reused=reused, keyed=keyed)


def result_file(folder: Path, shard: PlannedShard) -> Path:
    return folder / shard.stage / "result.json"


def _taken(folder: Path, shard: PlannedShard) -> tuple[StageResult | None, dict[str, str]]:
    """(the shard's accepted result or None when it left none, its failure logs); a damaged
    file (truncated, not UTF-8, not schema-valid, another shard's) is the shard's ERROR."""
    path = result_file(folder, shard)
    if not path.exists():
        return None, {}
    try:
        result = read_result(path, shard)
        jsonl = path.with_name("tests.jsonl")
        return result, failure_logs(jsonl) if jsonl.exists() else {}
    except (ValueError, StagebotError, OSError) as error:
        why = f"result.json unreadable: {_one_line(error)} ({path.relative_to(folder)})"
        return placeholder_result(shard, "ERROR", why), {}


def read_result(path: Path, shard: PlannedShard) -> StageResult:
    """The StageResult at ``path``, which must be the planned ``shard``'s own."""
    result = StageResult.from_json(json.loads(path.read_text(encoding="utf-8")))
    claimed = (result.stage, result.shard, result.shards)
    planned = (shard.stage, shard.shard, shard.shards)
    if claimed != planned:
        raise ResultError(
            f"it claims stage {claimed[0]!r} shard {claimed[1]}/{claimed[2]}, but its folder "
            f"is planned shard {planned[0]!r} {planned[1]}/{planned[2]}"
        )
    return result


def _one_line(error: Exception) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 300 else text[:299] + "…"
