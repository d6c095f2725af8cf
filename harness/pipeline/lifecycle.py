"""Start, finish and abort a pipeline in the ledger; write its report files.

Every path that runs a pipeline (`bot run` here, `bot handle-event` then `bot publish` in
Actions) starts it from its Plan and finishes it the same way: the analysis of the recorded
results against a base decides the final state, the ledger records it, and the Report says it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from stagebot.harness.ledger.store import busy_timeout_s, retry_busy
from stagebot.harness.report import Report, render_report, report_from_record
from stagebot.harness.report.gpu_time import by_gpu_type, cancelled_by_fail_fast
from stagebot.stages.catalog import Catalog
from stagebot.stages.plan import Plan


def start(
    book,
    plan: Plan,
    *,
    catalog: Catalog | None = None,
    number: int | None = None,
    branch: str | None = None,
    base_commit: str | None = None,
    meta: dict[str, Any] | None = None,
) -> int:
    """Record pipeline ``number`` (the next one when None) running ``plan``; returns its number.
    With ``catalog``, the stages' paths are recorded for the failure analysis' suspects."""
    meta = dict(meta or {})
    if catalog is not None:
        meta["stage_paths"] = catalog.suspect_patterns([s.stage for s in plan.shards])
    return book.start_pipeline(
        command=plan.command,
        commit=plan.commit,
        plan=plan.to_json(),
        pr=plan.pr,
        branch=branch,
        base_commit=base_commit,
        number=number,
        meta=meta,
    )


def finish(
    book,
    number: int,
    *,
    base,
    cancelled: bool,
    meta: dict[str, Any] | None = None,
    root: Path | None = None,
    log_links: dict[str, str] | None = None,
    main_book=None,
) -> Report:
    """Decide pipeline ``number``'s final state from its recorded results against ``base`` (a
    ``base.Base``), record it with ``meta`` (and the base pipeline, its GPU-minutes by GPU type
    and what its cancelled shards would have run: their stage's last full run in ``book``, else
    in ``main_book``, main's ledger, which a PR's first pipeline on GitHub has beside its own),
    and return its Report."""
    record = book.pipeline(number)
    books = [book] + ([main_book] if main_book is not None else [])
    expected = {  # what the shards fail-fast cancelled would have run (report/gpu_time.py)
        result.stage: next(filter(None, (b.shard_duration(result.stage) for b in books)), 0.0)
        for result in record.results
        if cancelled_by_fail_fast(result)
    }
    meta = {**(meta or {}), "base_pipeline": base.pipeline, "fail_fast_expected_s": expected}
    record = replace(record, meta={**(record.meta or {}), **meta})
    report = report_from_record(
        record, base=base, cancelled=cancelled, root=root, log_links=log_links
    )
    meta["gpu_minutes"] = by_gpu_type(report.gpu_times)  # what `bot stages --cost` sums
    retry_busy(lambda: book.finish_pipeline(number, report.analysis.state, meta=meta))
    report.state = report.analysis.state
    return report


def abort(book, number: int, error: BaseException) -> str:
    """Best effort after an error mid-run: the pipeline ends ABORTED, never stays RUNNING.
    Returns what to tell the user."""
    why = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    try:
        retry_busy(
            lambda: book.finish_pipeline(number, "ABORTED", meta={"error": why}),
            patience_s=busy_timeout_s(),
        )
    except Exception as failure:  # noqa: BLE001 - the original error is what the user sees
        return (
            f"pipeline #{number} could not be marked ABORTED in {book.path} ({failure}); "
            f"it stopped because of {why}"
        )
    return f"pipeline #{number} ended ABORTED: {why}"


def write_reports(report: Report, out: Path) -> Path:
    """Write report.md (GitHub's markdown) and report.html into ``out``; returns report.md."""
    out.mkdir(parents=True, exist_ok=True)
    markdown = out / "report.md"
    markdown.write_text(render_report(report, "md"), encoding="utf-8")
    (out / "report.html").write_text(render_report(report, "html"), encoding="utf-8")
    return markdown
