"""A Report from a ledger record, or from loose StageResult folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stagebot.harness.analysis.classify import analyse
from stagebot.harness.report.gpu_time import stage_gpu_times
from stagebot.harness.report.model import Report
from stagebot.harness.results import ResultError, StageResult
from stagebot.harness.run.streams import read_stream


def report_from_record(
    record,
    *,
    base=None,
    cancelled: bool | None = None,
    root: Path | None = None,
    log_links: dict[str, str] | None = None,
) -> Report:
    """A Report of a ledger ``PipelineRecord`` (see ``bot.ledger``) against ``base`` (a
    ``bot.base.Base``); ``root``: the checkout the tests ran from (suspects read its imports);
    ``log_links``: stage -> the full log's URL (the stage job on GitHub), else the local file."""
    plan = record.planned
    meta = record.meta or {}
    order = {shard.stage: i for i, shard in enumerate(plan.shards)} if plan else {}
    results = sorted(record.results, key=lambda r: order.get(r.stage, len(order)))
    changed_files = plan.changed_files if plan else None
    analysis = analyse(
        results,
        **base_arguments(base),
        changed_files=changed_files,
        stage_paths=meta.get("stage_paths"),
        logs=record.logs,
        cancelled=record.state == "ABORTED" if cancelled is None else cancelled,
        root=root,
        log_links=log_links,
    )
    return Report(
        pipeline=record.number,
        commit=record.commit,
        pr=record.pr,
        command=_command_text(record.command),
        state=record.state if record.state != "RUNNING" else analysis.state,
        gating=plan.gating if plan else record.gating,
        partly_tested_reason=plan.partly_tested_reason if plan else None,
        started_at=record.started_at,
        finished_at=record.finished_at,
        results=results,
        analysis=analysis,
        changed_files=changed_files,
        slots=meta.get("slots", {}),
        reused_tests=record.reused_tests,
        host=meta.get("host", ""),
        triggered_by=meta.get("triggered_by", ""),
        ignored_results=list(meta.get("ignored_results") or []),
        local=bool(meta.get("local")),
        rerun_options=tuple(meta.get("rerun_options") or ()),
        root=root,
        key_reuses=record.key_reuses,
        reuse_faults=record.reuse_faults,
        gpu_times=stage_gpu_times(
            results,
            {shard.stage: shard.gpu_count for shard in plan.shards} if plan else {},
            record.reused_seconds,
            meta.get("fail_fast_expected_s") or {},
        ),
        reuse_audits=list(meta.get("reuse_audits") or []),
    )


def base_arguments(base) -> dict[str, Any]:
    if base is None:
        return {}
    return {
        "base": base.outcomes,
        "base_pipeline": base.pipeline,
        "flaky_history": base.flaky,
        "flaky_evidence": base.flaky_evidence,
        "base_logs": base.logs,
        "base_commit": base.commit,
    }


def report_from_results(folder: Path, *, pipeline: int | None = None, base=None) -> Report:
    """A Report assembled from every ``result.json`` under ``folder`` (the Actions report job),
    against ``base`` (a ``bot.base.Base``)."""
    results, logs = [], {}
    for path in sorted(folder.rglob("result.json")):
        try:
            result = StageResult.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, ResultError) as error:
            raise ResultError(f"{path}: not a StageResult ({error})") from None
        results.append(result)
        stream = read_stream(path.with_name("tests.jsonl"))
        for test_id, record in stream.results.items():
            if record.get("log"):
                logs[(result.stage, test_id)] = record["log"]
    if not results:
        raise ResultError(f"{folder}: no result.json below this folder")
    analysis = analyse(results, logs=logs, **base_arguments(base))
    starts = [r.started_at for r in results if r.started_at]
    ends = [r.finished_at for r in results if r.finished_at]
    return Report(
        pipeline=pipeline,
        commit=None,
        pr=None,
        command="(assembled from StageResult files)",
        state=analysis.state,
        gating=False,
        partly_tested_reason="assembled from result files: the plan is not known here",
        started_at=min(starts) if starts else None,
        finished_at=max(ends) if ends else None,
        results=results,
        analysis=analysis,
    )


def _command_text(command: dict[str, Any]) -> str:
    from stagebot.stages.command import Command, render

    try:
        return render(Command.from_json(command))
    except Exception:  # noqa: BLE001 - a record from another version: show it raw
        return json.dumps(command)
