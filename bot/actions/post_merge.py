"""A push to the default branch: plan the post-merge pipeline (`/bot run --post-merge`) on the
pushed commit, with no reply and no status. The restored ledger (main's history, which PR
pipelines compare with) is used only when a ``stagebot/ledger`` status vouches for it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from stagebot.bot.comments.events import push_event
from stagebot.bot.comments.outcome import Outcome
from stagebot.bot.custody.trust import RestoredLedger, main_ledger_trust


def plan_post_merge(
    payload: dict,
    catalog: Path | None,
    run_number: int | None,
    ledger_path: Path | None,
    connect: Callable,
    audit_rate: float = 0.0,
) -> Outcome:
    """``audit_rate``: the share of the tests reused by key that the stage jobs run anyway
    (the bot's ``reuse_audit_rate``; harness/reuse/sampled.py)."""
    from stagebot.bot.comments.grammar import parse_comment
    from stagebot.bot.custody.main_ledger import RECORDED_WHERE
    from stagebot.bot.protocols.dispatch_inputs import fitting
    from stagebot.harness.pipeline.lifecycle import start
    from stagebot.harness.reuse.offers import offer
    from stagebot.stages.catalog import load_catalog
    from stagebot.stages.matrix import matrix_entries
    from stagebot.stages.planner import plan_run

    event = push_event(payload)
    if not event.on_default_branch:
        return Outcome(f"no-op: push to {event.ref}, not to {event.default_branch}")
    loaded = load_catalog(catalog)
    trusted = main_ledger_trust(connect, ledger_path) if ledger_path is not None else None
    ledger = RestoredLedger(ledger_path, trusted=trusted, recorded_where=RECORDED_WHERE)
    try:
        book = ledger.get()
        command = parse_comment("/bot run --post-merge")
        plan = plan_run(command, loaded, commit=event.sha, history=book)
        pipeline = run_number or ((book.latest_number() or 0) + 1 if book else 1)
        if book is not None:  # the default branch's history, which PR pipelines compare with
            start(book, plan, catalog=loaded, branch=event.default_branch, number=pipeline)
        entries = offer(
            matrix_entries(plan, loaded, pipeline),
            loaded,
            book,
            pipeline,
            default_branch=event.default_branch,
            audit_rate=audit_rate,
        )
    finally:
        ledger.close()
    entries = [e.to_json() for e in fitting(entries)]
    return Outcome(
        f"post-merge pipeline #{pipeline} on {event.sha[:7]}: {len(entries)} shard(s) to run",
        run=True,
        matrix=entries,
        pipeline=pipeline,
        commit=event.sha,
        plan=plan.to_json(),
        notice=ledger.notice,
    )
