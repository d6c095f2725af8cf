"""The pipeline report: markdown (the PR comment), self-contained HTML, or JSON; and the replies.

API (also used by the GitHub adapter)::

    base = select_base(ledger, base_commit=record.base_commit, exclude=n)  # pipeline/base.py
    report = report_from_record(ledger.pipeline(n), base=base, root=Path("."))
    report = report_from_results(Path("results/"), base=base)  # StageResult folders (Actions)
    text = render_report(report, "md")               # "md" | "html" | "json"
    reply_triggered(report) / reply_completed(report)

The markdown fits GitHub's 65,536-character comment limit (it shortens the key lines, then drops
them and collapses long lists, then cuts with a pointer to the HTML report), and escapes
@mentions and anything that looks like HTML (so test output can never forge the bot's hidden
reply marker).

Modules: ``model`` (the Report), ``status`` (the gating status it decides), ``headline``,
``timeline`` (the HTML's Gantt chart), ``build`` (a Report from a ledger record or result
files), ``render`` (md, text, html, json, the replies).
"""

from stagebot.harness.report.build import report_from_record, report_from_results
from stagebot.harness.report.model import Report
from stagebot.harness.report.render import (
    COMMENT_LIMIT,
    html_inline,
    local_href,
    md_code,
    plain_text,
    render_report,
    reply_completed,
    reply_triggered,
)
from stagebot.harness.report.status import StatusDecision

__all__ = [
    "COMMENT_LIMIT",
    "Report",
    "StatusDecision",
    "html_inline",
    "local_href",
    "md_code",
    "plain_text",
    "render_report",
    "reply_completed",
    "reply_triggered",
    "report_from_record",
    "report_from_results",
]
