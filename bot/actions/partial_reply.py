"""The partial report: while some of a pipeline's stage runs still run, its one reply is edited
to show the stages done with their verdicts, the failures found so far (the report below the
head), what still runs with an estimate of when it ends, and what fail-fast cancelled; a NEW
failure turns the pending status' description into "NEW failure in <stage>".

Report runs of one pipeline run at once and land in any order, and GitHub has no conditional
comment edit, so a partial report replaces the reply only when the reply still says RUNNING
(never over a final report, a /bot kill or a newer /bot run's ABORTED) and shows fewer stages
done than this report knows (the marker's ``stages``: PENDING until done). The caller looks at
the stage runs again after writing and repeats (bot/actions/report_run.py): a report that knew
less and wrote last is repaired by the one that sees more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stagebot.harness.pipeline.fail_fast import Condemned
from stagebot.harness.report.units import duration_text


@dataclass(frozen=True)
class Progress:
    """Where the pipeline's stage runs stand, as one report run found them."""

    done: list[str]  # planned stages whose run finished, in the plan's order
    running: list[str]  # those still queued or running
    cancelled: list[str]  # those fail-fast cancelled (finished or still being cancelled)
    condemned: Condemned | None  # the first finished stage's NEW failure, if any
    expected_s: dict[str, float | None]  # running stage -> its last full run in the ledger
    elapsed_s: dict[str, float] = field(default_factory=dict)  # running stage -> since its start

    @property
    def total(self) -> int:
        return len(self.done) + len(self.running)

    @property
    def going_on(self) -> list[str]:
        """The stages still running that fail-fast is not cancelling."""
        return [s for s in self.running if s not in self.cancelled]

    @property
    def eta(self) -> str:
        """When the stages still running should end, from the ledger's durations."""
        known = {s: d for s, d in self.expected_s.items() if d is not None and s in self.going_on}
        unknown = [s for s in self.going_on if s not in known]
        if not known:
            return "No estimate of when they end: the ledger has no full run of them."
        left = {s: max(0.0, d - self.elapsed_s.get(s, 0.0)) for s, d in known.items()}
        slowest = max(left, key=left.__getitem__)
        text = f"Expected to end within about {duration_text(left[slowest])} ({slowest}'s last "
        text += f"full run in the ledger took {duration_text(known[slowest])}"
        if slowest in self.elapsed_s:
            text += f", its run started {duration_text(self.elapsed_s[slowest])} ago"
        text += ")"
        if unknown:
            text += f"; no full run of {', '.join(unknown)} is recorded"
        return text + "."

    def stages(self) -> dict[str, str]:
        """The marker's stage -> state for the stages not done yet."""
        return dict.fromkeys(self.running, "PENDING")


def refusal(marker, known: int) -> str | None:
    """Why a partial report that knows ``known`` stages done must not replace the reply whose
    marker is ``marker`` (None: no reply), or None when it may."""
    if marker is None or marker.state != "RUNNING":
        return f"its reply says {marker.state if marker else 'nothing (there is none)'}"
    if marker.done >= known:
        return f"its reply already shows {marker.done} stage(s) done, this report knows {known}"
    return None


def publish_partial(api, env, config, report, progress: Progress) -> list[str]:
    """Edit the pipeline's reply into the partial report (see the module) and, on a NEW failure,
    say it in the pending status; returns what to print."""
    from dataclasses import replace

    from stagebot.bot.actions.gating_status import set_gating_status
    from stagebot.bot.comments.replies import our_replies, reply_for_pipeline, with_ledger_digest
    from stagebot.bot.protocols.marker import find_ledger_record
    from stagebot.harness.report import COMMENT_LIMIT, StatusDecision, render_report
    from stagebot.harness.report.status_text import pipeline_status
    from stagebot.templates import render_template

    number = report.pipeline
    existing = reply_for_pipeline(our_replies(api.comments(report.pr), config.bot_login), number)
    why = refusal(existing.marker if existing else None, len(progress.done))
    if why is not None:
        return [f"partial report of pipeline #{number} not written: {why}"]
    finished = {r.stage: r.state for r in report.results if r.stage in progress.done}
    stages = {**existing.marker.stages, **finished, **progress.stages()}  # REUSED ones kept
    marker = replace(existing.marker, stages=stages)
    record = find_ledger_record(existing.comment.body)  # the plan job's ledger stays named
    tail = "\n\n" + with_ledger_digest(
        marker.render(), record.digest if record else None, record.run_id if record else None
    )
    head = render_template("report_reply_partial.md.j2", r=report, p=progress).rstrip()
    limit = COMMENT_LIMIT - len(head) - len(tail) - 2
    body = head + "\n\n" + render_report(report, "md", limit=limit).rstrip() + tail + "\n"
    api.edit_comment(existing.comment.id, body)
    lines = [
        f"edited reply {existing.comment.id} into the partial report: "
        f"{len(progress.done)} of {progress.total} stage(s) done"
    ]
    if progress.condemned is not None and report.gating:
        what = f"is running on {report.sha7}: {progress.condemned.headline}"
        status = StatusDecision("pending", pipeline_status(number, what)[:140])
        lines.append(
            set_gating_status(
                api, config.status_context, report.commit, number, status, env.run_url
            )
        )
    return lines
