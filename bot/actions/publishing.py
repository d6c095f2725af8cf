"""Publish a pipeline run by GitHub Actions: take the stage jobs' results into the ledger,
finish the pipeline, edit its one reply into the report and set the gating status (`bot
publish`, and `bot report-run` once it has validated a stage run).

- The pipeline's life (results recorded against the plan, state, report) is the harness'
  (harness/pipeline); this module adds GitHub: main's ledger as the base only when the bot
  vouched for it (bot/custody/trust.py), the stage jobs' log links, the reply and the status.
- The reply is found by the id the plan job recorded, else by its marker's pipeline number; a
  missing reply is posted (once: the marker makes the post idempotent). Nothing is published
  over a reply that says ABORTED (a /bot kill or a newer /bot run) unless this run was
  cancelled: a stage run that went on after its pipeline was stopped never turns the reply into
  a result.
- The reply records the sha256 of the ledger as this job leaves it (a hidden line before the
  marker); `bot handle-event` accepts the next restored ledger only when it matches. A
  post-merge pipeline records it as the ``stagebot/ledger`` status of its commit instead.
- With ``artifact_digest`` (the plan job's output), plan.json and the ledger must be what the
  plan job left: a replaced artifact publishes nothing (bot/custody/trust.py, exit 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

REUSE_AUDIT_STATUS = "stagebot/reuse-audit"


@dataclass(frozen=True)
class PublishRequest:
    pipeline: int
    results: Path  # the stage jobs' shard folders (result.json, tests.jsonl, …)
    ledger: Path  # the PR's ledger as the plan job left it
    plan_path: Path | None = None  # plan.json, for a ledger that lacks the pipeline
    base_ledger: Path | None = None  # main's ledger (used only when vouched for)
    cancelled: bool = False  # a stage run was cancelled: unfinished shards are ABORTED
    aborted: dict[str, str] = field(default_factory=dict)  # stage -> why fail-fast cancelled it
    out: Path | None = None  # also write report.md and report.html here
    artifact_digest: str | None = None  # the plan job's digest of plan.json and the ledger
    stage_runs: tuple[int, ...] = ()  # whose jobs' pages are the stage logs (default: this run)
    unreadable: dict[str, str] = field(default_factory=dict)  # stage -> why its artifact failed


def publish(request: PublishRequest, env, config) -> list[str]:
    """Record, finish, render and report pipeline ``request.pipeline``; returns what to print."""
    from stagebot.bot.comments.events import default_branch
    from stagebot.bot.custody.files import file_digest
    from stagebot.bot.custody.trust import check_plan_artifact, open_main_ledger, record_main_ledger
    from stagebot.bot.github import RetryPolicy, connect
    from stagebot.harness.ledger.book import Ledger
    from stagebot.harness.pipeline.conclude import conclude

    number = request.pipeline
    if request.artifact_digest is not None:
        check_plan_artifact(request.artifact_digest, request.plan_path, request.ledger)
    api = connect(env, RetryPolicy.from_environ())
    # before the ledger changes: GitHub failing here (exit 3) leaves it as the plan job did
    base_book, lines = open_main_ledger(lambda: api, request.base_ledger)
    links, warning = job_links(api, list(request.stage_runs) or [env.run_id])
    lines += warning
    book = Ledger.open(request.ledger)
    record, report = conclude(
        book,
        number,
        request.results,
        plan_path=request.plan_path,
        cancelled=request.cancelled,
        unreadable=request.unreadable,
        aborted=request.aborted,
        default_branch=default_branch(env.event_path),
        main_book=base_book,
        log_links=links,
        out=request.out,
    )
    lines.insert(0, f"pipeline #{number}: {report.state}")
    book.close()  # final: the bytes the report job saves for the PR's next pipeline
    if record.pr is not None:
        digest = file_digest(request.ledger)
        lines += _publish_to_pr(api, env, config, record, report, digest, request.cancelled)
    else:
        lines.append(record_main_ledger(api, request.ledger, env.run_id))
        lines += _audit_status(api, record.commit, report)
    return lines


def _audit_status(api, commit: str, report) -> list[str]:
    """A post-merge pipeline has no reply: its reuse audit (harness/reuse/sampled.py) is the
    ``stagebot/reuse-audit`` status of its commit, a failure when a sampled test disagreed."""
    if not report.reuse_audits:
        return []
    line = str(report.reuse_audit_line())
    state = "failure" if report.reuse_faults else "success"
    api.set_status(commit, state, REUSE_AUDIT_STATUS, line, None)
    return [f"{line} ({REUSE_AUDIT_STATUS} status: {state})"]


def job_links(api, run_ids: list[int | None]) -> tuple[dict[str, str], list[str]]:
    """(stage -> its job's page: the full log; what to say): a stage job is named after its
    stage, so the jobs of the stage runs link each stage's log. Without a run id (not in
    Actions) or when GitHub will not say, the report links nothing."""
    from stagebot.bot.github import GitHubError

    links: dict[str, str] = {}
    for run_id in run_ids:
        if run_id is None:
            continue
        try:
            links.update(api.job_urls(run_id))
        except GitHubError as error:
            return {}, [f"warning: the stage jobs' log links are left out ({error})"]
    return links, []


def _publish_to_pr(
    api, env, config, record, report, ledger_digest: str, cancelled: bool
) -> list[str]:
    """Edit the pipeline's reply into the report and set the status (see the module's doc)."""
    from stagebot.bot.actions.gating_status import set_gating_status
    from stagebot.bot.comments.replies import our_replies, reply_for_pipeline, with_ledger_digest
    from stagebot.bot.protocols.marker import ReplyMarker
    from stagebot.harness.report import COMMENT_LIMIT, render_report, reply_completed

    lines = []
    replies = our_replies(api.comments(record.pr), config.bot_login)
    existing = reply_for_pipeline(replies, record.number)
    if existing is not None and existing.marker.state == "ABORTED" and not cancelled:
        return [
            f"reply {existing.comment.id} says pipeline #{record.number} was killed or "
            "superseded while its stage run went on: nothing is published over it"
        ]
    marker = ReplyMarker(
        pipeline=record.number,
        commit=record.commit or "unknown",
        comment_id=existing.marker.comment_id if existing else 0,
        state=report.state,
        stages={r.stage: r.state for r in report.results},
    )
    head = reply_completed(report).rstrip() + "\n\n"
    # the ledger's digest: handle-event accepts the next restored ledger only if it matches
    tail = "\n\n" + with_ledger_digest(marker.render(), ledger_digest, env.run_id) + "\n"
    body_md = render_report(report, "md", limit=COMMENT_LIMIT - len(head) - len(tail)).rstrip()
    body = head + body_md + tail
    if existing is not None:
        api.edit_comment(existing.comment.id, body)
        lines.append(f"edited reply {existing.comment.id} into the report")
    else:

        def landed():
            again = reply_for_pipeline(
                our_replies(api.comments(record.pr), config.bot_login), record.number
            )
            return again.comment if again else None

        comment = api.create_comment(record.pr, body, recover=landed)
        lines.append(f"posted the report as reply {comment.id} (no trigger reply was found)")
    lines.append(
        set_gating_status(
            api, config.status_context, record.commit, record.number, report.status, env.run_url
        )
    )
    return lines
