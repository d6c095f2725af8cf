"""A pipeline run by GitHub Actions, concluded in one call (`bot publish`, `bot report-run`):
``conclude``; or seen as it stands while stages still run (`bot report-run`): ``observe``.

Below it, in order: the pipeline started from plan.json when the ledger lacks it, the stage
jobs' results taken in against the plan (intake.py), the base chosen, the pipeline finished and
its reports written. The caller adds GitHub: which main's ledger is vouched for, the stage jobs'
log links, the reply and the status.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from stagebot.harness.ledger.book import Ledger
from stagebot.harness.ledger.pipelines import PipelineRecord
from stagebot.harness.pipeline.base import Base, select_base
from stagebot.harness.pipeline.intake import record_stage_results
from stagebot.harness.pipeline.lifecycle import finish, start, write_reports
from stagebot.harness.report import Report, report_from_record
from stagebot.stages.errors import StagebotError
from stagebot.stages.plan import Plan


def conclude(
    book: Ledger,
    number: int,
    results: Path,
    *,
    plan_path: Path | None,
    cancelled: bool,
    unreadable: Mapping[str, str],
    default_branch: str,
    main_book: Ledger | None,
    log_links: Mapping[str, str],
    out: Path | None,
    aborted: Mapping[str, str] | None = None,
) -> tuple[PipelineRecord, Report]:
    """Record the stage jobs' ``results`` into pipeline ``number`` of ``book``, finish it against
    its base (in ``main_book``, main's ledger, when given) and write its reports to ``out``
    (when given): (the pipeline as it was before, its report). ``aborted``: stage -> why its
    stage run was cancelled (fail-fast)."""
    record, ignored, base = _taken_in(
        book,
        number,
        results,
        plan_path=plan_path,
        cancelled=cancelled,
        unreadable=unreadable,
        aborted=aborted,
        only=None,
        default_branch=default_branch,
        main_book=main_book,
    )
    report = finish(
        book,
        number,
        base=base,
        cancelled=cancelled,
        meta={"ignored_results": ignored},
        log_links=log_links,
        main_book=main_book,
    )
    if out is not None:
        write_reports(report, out)
    return record, report


def observe(
    book: Ledger,
    number: int,
    results: Path,
    *,
    finished: set[str],
    plan_path: Path | None,
    unreadable: Mapping[str, str],
    aborted: Mapping[str, str],
    default_branch: str,
    main_book: Ledger | None,
    log_links: Mapping[str, str],
) -> tuple[Report, Base]:
    """Pipeline ``number`` as it stands while some of its stages still run (a partial report):
    the ``finished`` stages' results recorded into ``book``, the pipeline left RUNNING: (its
    report, the base its failures are compared with)."""
    _, _, base = _taken_in(
        book,
        number,
        results,
        plan_path=plan_path,
        cancelled=False,
        unreadable=unreadable,
        aborted=aborted,
        only=finished,
        default_branch=default_branch,
        main_book=main_book,
    )
    report = report_from_record(
        book.pipeline(number), base=base, cancelled=False, log_links=dict(log_links)
    )
    report.state = "RUNNING"
    return report, base


def _taken_in(
    book: Ledger,
    number: int,
    results: Path,
    *,
    plan_path: Path | None,
    cancelled: bool,
    unreadable: Mapping[str, str],
    aborted: Mapping[str, str] | None,
    only: set[str] | None,
    default_branch: str,
    main_book: Ledger | None,
) -> tuple[PipelineRecord, list[str], Base]:
    """The stage results taken into pipeline ``number`` (started from plan.json when the ledger
    lacks it), then its base chosen: (the pipeline as it was before, the result files ignored,
    the base)."""
    record = book.pipeline(number, with_results=False)
    if record is None:
        record = _start_from_plan(book, number, plan_path)
    ignored = record_stage_results(
        book,
        number,
        _plan_of(record),
        results,
        cancelled=cancelled,
        unreadable=unreadable,
        aborted=aborted,
        only=only,
        default_branch=default_branch,
        main_book=main_book,
    )
    base = select_base(
        book,
        base_book=main_book,
        base_commit=record.base_commit,
        default_branch=default_branch,
        exclude=number,
    )
    return record, ignored, base


def _start_from_plan(book: Ledger, number: int, plan_path: Path | None) -> PipelineRecord:
    if plan_path is None or not plan_path.exists():
        raise StagebotError(
            f"ledger {book.path} has no pipeline #{number} and no plan.json was given; "
            "give --plan (from `bot handle-event --out`) or the plan job's ledger"
        )
    start(book, Plan.from_json(json.loads(plan_path.read_text())), number=number)
    return book.pipeline(number, with_results=False)


def _plan_of(record: PipelineRecord) -> Plan:
    plan = record.planned
    if plan is None:
        raise StagebotError(
            f"pipeline #{record.number} was recorded without a plan (a reuse-pipeline "
            "validation): there is nothing to publish"
        )
    return plan
