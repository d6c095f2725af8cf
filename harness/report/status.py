"""The gating status a pipeline's report decides: one decision, which the reply says and
`bot publish` sets (worded by harness/pipeline/status_text.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from stagebot.harness.pipeline.status_text import pipeline_status

if TYPE_CHECKING:
    from stagebot.harness.report.model import Report


@dataclass(frozen=True)
class StatusDecision:
    """The gating commit status a pipeline sets: ``state`` (success | failure | error) with its
    ``description``; ``state`` None when the pipeline leaves the status alone (Partly Tested)."""

    state: str | None
    description: str


def decide_status(report: Report) -> StatusDecision:
    """The one decision of the status this pipeline sets: the reply says what `bot publish`
    sets. A gating pipeline always sets one; shards that could not run make it an error."""
    if not report.gating:
        return StatusDecision(None, "Partly Tested: the status is left alone")
    if report.state == "FAILURE":
        state, what = "failure", f"failed: {report.headline()}"
    elif report.state == "ABORTED":
        state, what = "error", "was aborted before it finished"
    elif report.state != "SUCCESS" or report.analysis.not_run:
        missing = len(report.analysis.not_run)
        state, what = "error", f"could not run {missing} stage(s): not a pass"
    else:
        state, what = "success", f"passed on {report.sha7}"
    return StatusDecision(state, pipeline_status(report.pipeline or 0, what))
