"""What each accepted `/bot` command does on a PR: run, kill, skip, reuse-pipeline.

Each is a function of the handling's ``Session`` and the parsed command that returns the
Outcome; it posts the one reply and may set the gating status. A user's mistake that only
planning finds (an unknown stage, a pipeline the ledger lacks) raises its CommandError,
PlanError or UnknownPipelineError: bot/comments/on_comment.py answers it as a malformed command.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from stagebot.bot.comments.authz import approve
from stagebot.bot.comments.outcome import Outcome
from stagebot.bot.comments.replies import NO_RUN_STATE, render_reply, running
from stagebot.bot.comments.session import Session
from stagebot.bot.github import TimelineEvent
from stagebot.harness.report import status_text
from stagebot.stages.command import Command, render
from stagebot.stages.errors import StagebotError

log = logging.getLogger("stagebot.bot")


def run(session: Session, command: Command) -> Outcome:
    """Plan the PR's head, record the pipeline, reply, and set the status pending (gating)."""
    from stagebot.bot.comments.events import default_branch
    from stagebot.bot.custody.trust import fetched_main_ledger
    from stagebot.bot.protocols.dispatch_inputs import fitting
    from stagebot.harness.pipeline.lifecycle import start
    from stagebot.harness.reuse.offers import offer
    from stagebot.stages.catalog import load_catalog
    from stagebot.stages.matrix import matrix_entries
    from stagebot.stages.planner import plan_run

    pull, api, book = session.pull, session.api, session.ledger.get()
    commit = pull.head_sha  # pinned now: later pushes do not change this pipeline
    changed = api.changed_files(pull.number)
    reuse_from = command.run.reuse_test if command.run else None
    if isinstance(reuse_from, int) and book is not None:
        book.require_pipeline(reuse_from)
    catalog = load_catalog(session.catalog_path)
    plan = plan_run(
        command, catalog, changed_files=changed, commit=commit, pr=pull.number, history=book
    )
    approval = approve(
        plan.needs_approval,
        plan.approval_reasons,
        pull.labels,
        session.config,
        head=commit,
        timeline=lambda: session.timeline,
        is_approver=lambda event: _is_approver(session, event),
        reply_commits={r.comment.id: r.marker.commit for r in session.replier.replies},
    )
    if not approval.allowed:
        return session.refused(command, approval, label_missing=True)
    api.react(session.event.comment_id, "eyes")
    cancelled = stop_running(session, f"Superseded by {status_text.label(session.pipeline)}.")
    recorded = book.pipeline(session.pipeline, with_results=False) if book else None
    if book is not None and recorded is None:  # a re-run may find it recorded
        start(book, plan, catalog=catalog, number=session.pipeline, base_commit=pull.base_sha)
    reuse = book is not None and not (command.run and command.run.disable_reuse_test)
    main_book = (
        fetched_main_ledger(api, session.config, session.ledger.path.with_name("main.sqlite"))
        if reuse
        else None
    )
    try:
        entries = offer(
            matrix_entries(plan, catalog, session.pipeline),
            catalog,
            book,
            session.pipeline,
            default_branch=default_branch(session.env.event_path),
            enabled=reuse,
            main_book=main_book,
        )
    finally:
        if main_book is not None:
            main_book.close()
    entries = [entry.to_json() for entry in fitting(entries)]
    counts = {action: len(plan.shards_to(action)) for action in ("run", "reuse", "skip")}
    stages = {s.stage: "PENDING" for s in plan.shards_to("run")}
    stages |= {s.stage: "REUSED" for s in plan.shards_to("reuse")}
    reply = session.reply(
        "triggered",
        "RUNNING",
        stages=stages,
        command=render(command),
        commit=commit,
        cancelled=cancelled,
        counts=counts,
        partly_tested_reason=None if plan.gating else plan.partly_tested_reason,
    )
    if plan.gating:
        api.set_status(
            commit,
            "pending",
            session.config.status_context,
            status_text.running(session.pipeline, commit[:7]),
            session.env.run_url,
        )
    return Outcome(
        f"pipeline #{session.pipeline}: {counts['run']} shard(s) to run on {commit[:7]}",
        run=True,
        matrix=entries,
        pipeline=session.pipeline,
        commit=commit,
        pr=pull.number,
        reply_id=reply.id,
        plan=plan.to_json(),
    )


def kill(session: Session, command: Command) -> Outcome:
    session.api.react(session.event.comment_id, "eyes")
    killed = stop_running(session, f"Killed by @{session.event.author} (/bot kill).")
    session.reply("killed", NO_RUN_STATE, killed=killed)
    return Outcome(
        f"killed {len(killed)} pipeline(s)" if killed else "kill: nothing was running",
        pipeline=session.pipeline,
    )


def skip(session: Session, command: Command) -> Outcome:
    assert command.comment is not None
    session.api.react(session.event.comment_id, "eyes")
    sha = session.pull.head_sha
    session.api.set_status(
        sha,
        "success",
        session.config.status_context,
        status_text.skipped(session.event.author, command.comment),
        session.env.run_url,
    )
    session.reply("skipped", "SUCCESS", reason=command.comment)
    return Outcome(f"skip: {sha[:7]} marked success without testing", pipeline=session.pipeline)


def reuse_pipeline(session: Session, command: Command) -> Outcome:
    """Validate the head commit with pipeline N (the ledger's policy decides whether N may),
    stop the PR's running pipelines, and set the gating status from N."""
    from stagebot.harness.reuse.policy import record_validation

    book = session.ledger.get()
    if book is None:
        raise StagebotError(
            "reuse-pipeline needs the pipeline ledger: give handle-event --ledger PATH"
        )
    session.api.react(session.event.comment_id, "eyes")
    head = session.pull.head_sha
    validation = record_validation(
        book, head, command.pipeline_id, pr=session.pull.number, number=session.pipeline
    )
    if not validation.ok:
        session.reply("reused", NO_RUN_STATE, ok=False, why=validation.reason, source=None)
        return Outcome(f"reuse-pipeline refused: {validation.reason}", pipeline=session.pipeline)
    stopped = stop_running(session, f"Replaced by reusing {status_text.label(validation.source)}.")
    changed: list[str] | None = None
    if validation.source_commit and validation.source_commit != head:
        changed = session.api.compare_files(validation.source_commit, head)
    session.api.set_status(
        head,
        "success",
        session.config.status_context,
        status_text.validated(validation.source, session.event.author),
        session.env.run_url,
    )
    session.reply(
        "reused",
        "SUCCESS",
        ok=True,
        why=validation.reason,
        source=validation.source,
        source_sha7=(validation.source_commit or head)[:7],
        changed=changed,
        stopped=stopped,
    )
    return Outcome(
        f"reuse-pipeline: {head[:7]} validated by #{validation.source}",
        pipeline=session.pipeline,
    )


def stop_running(session: Session, why: str) -> list[int]:
    """Cancel this PR's other running pipelines and mark them ABORTED (reply and ledger).
    The stage runs cancelled are those `bot dispatch` recorded in the reply's marker, never
    runs found by their title (anyone's workflow run can carry any title)."""
    api, book = session.api, session.ledger.get()
    stopped = []
    for reply in running(session.replier.replies, session.pipeline):
        number = reply.marker.pipeline
        reason = why
        runs = reply.marker.stage_runs  # only the runs the bot's dispatch recorded
        cancelled = [run_id for run_id in runs if api.cancel_run(run_id)]
        if runs and not cancelled:  # all had finished, yet the reply still says RUNNING
            reason += " " + _unreported(session, runs[-1])
        marker = replace(reply.marker, state="ABORTED")
        api.edit_comment(
            reply.comment.id,
            render_reply("aborted", marker, pipeline=number, sha7=marker.commit[:7], why=reason),
        )
        if book is not None:
            record = book.pipeline(number, with_results=False)
            if record is not None and record.state == "RUNNING":
                book.finish_pipeline(number, "ABORTED", meta={"aborted": reason})
        stopped.append(number)
    return stopped


def _unreported(session: Session, run_id: int) -> str:
    """What to say of a pipeline whose stage run had already finished while its reply still
    said RUNNING: no report run published it. Without the GitHub App the plan job dispatches
    with GITHUB_TOKEN, and whether GitHub then starts report.yml (workflow_run) for the
    finished run is not documented (docs/github.md "The bot's GitHub App")."""
    run_info = session.api.workflow_run(run_id)
    log.warning(
        "stage run %s finished (%s) but no report published it", run_id, run_info.conclusion
    )
    return (
        f"Its stage run {run_id} had already finished ({run_info.conclusion or 'no conclusion'}), "
        "but no report run had published it: report.yml did not run for it (GitHub may "
        "start no `workflow_run` run for a stage run dispatched with the GITHUB_TOKEN; set "
        "up the bot's GitHub App), or its report job failed."
    )


def _is_approver(session: Session, event: TimelineEvent) -> bool:
    if event.actor_id is not None and event.actor_id in session.config.approvers:
        return True
    return event.actor is not None and session.api.permission(event.actor).at_least("maintain")
