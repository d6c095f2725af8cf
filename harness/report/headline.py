"""The report's headline: what happened and what to do, in one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stagebot.harness.analysis.classify import BLOCKING

if TYPE_CHECKING:
    from stagebot.harness.report.model import Report


def headline(report: Report) -> str:
    """What happened and what to do, in one line (the status and the reply begin with it)."""
    counts = report.analysis.counts()
    blocking = sum(counts[c] for c in BLOCKING)
    not_run = len(report.analysis.not_run)
    if report.state == "ABORTED":
        return f"⏹️ Cancelled before it finished — {report.again()} to start again."
    if report.state == "NOT_RUN":
        return (
            f'⚠️ Nothing ran: {not_run} shard(s) could not run on this host (see "Not run") '
            "— nothing was tested, so this is not a pass."
        )
    if counts["NEW"]:
        return (
            f"❌ {counts['NEW']} new failure(s) {'these changes' if report.local else 'this PR'} "
            f"likely caused — fix them, then {report.again()} (it re-runs only what failed)."
        )
    if blocking:
        what = []
        if counts["PRE-EXISTING"]:
            what.append(f"{counts['PRE-EXISTING']} also failing on base")
        if counts["UNCLASSIFIED"]:
            what.append(f"{counts['UNCLASSIFIED']} with no base to compare")
        return f"❌ {blocking} failure(s) ({', '.join(what)}) — look at them below."
    if counts["INFRA"] and report.environment_errors():
        return (
            f"🛠️ {len(report.environment_errors())} shard(s) could not run in their environment "
            "— fix it (see INFRA below); a re-run there fails the same way."
        )
    if counts["INFRA"]:
        return (
            f"🛠️ {counts['INFRA']} infrastructure failure(s) only (timeouts, crashes, "
            f"runtime errors) — {report.again()} to retry; reuse re-runs only what failed."
        )
    flaky = f" ({counts['FLAKY']} flaky test(s) listed below)" if counts["FLAKY"] else ""
    if not_run:
        return (
            f"⚠️ Everything that ran passed{flaky}, but {not_run} shard(s) could not run "
            '(see "Not run") — not a pass.'
        )
    if not report.gating:
        return f"✅ Everything that ran passed{flaky} — Partly Tested, see below."
    return f"✅ All stages passed{flaky} — nothing to do."
