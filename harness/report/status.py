"""The gating status a pipeline's report decides: one decision, which the reply says and
`bot publish` sets (worded by harness/report/status_text.py)."""

from __future__ import annotations

from dataclasses import dataclass

from stagebot.harness.report.status_text import pipeline_status


@dataclass(frozen=True)
class StatusDecision:
    """The gating commit status a pipeline sets: ``state`` (success | failure | error) with its
    ``description``; ``state`` None when the pipeline leaves the status alone (Partly Tested)."""

    state: str | None
    description: str


def decide_status(
    *, pipeline: int, state: str, gating: bool, not_run: int, headline: str, sha7: str
) -> StatusDecision:
    """The one decision of the status pipeline ``pipeline`` (in ``state``, with ``not_run``
    shards that could not run) sets: the reply says what `bot publish` sets. A gating pipeline
    always sets one; shards that could not run make it an error."""
    if not gating:
        return StatusDecision(None, "Partly Tested: the status is left alone")
    if state == "FAILURE":
        decided, what = "failure", f"failed: {headline}"
    elif state == "ABORTED":
        decided, what = "error", "was aborted before it finished"
    elif state != "SUCCESS" or not_run:
        decided, what = "error", f"could not run {not_run} stage(s): not a pass"
    else:
        decided, what = "success", f"passed on {sha7}"
    return StatusDecision(decided, pipeline_status(pipeline, what))
