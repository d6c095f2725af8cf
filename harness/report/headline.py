"""The report's headline: what happened and what to do, in one line."""

from __future__ import annotations

from stagebot.harness.analysis.classify import BLOCKING, Analysis


def headline(
    analysis: Analysis,
    *,
    state: str,
    local: bool,
    gating: bool,
    again: str,
    environment_errors: int,
    ran: bool = True,
) -> str:
    """What happened and what to do, in one line (the status and the reply begin with it).
    ``again``: how to run the command again; ``environment_errors``: the ERROR shards whose
    environment cannot run them; ``ran``: whether any shard ran (not only reused)."""
    counts = analysis.counts()
    blocking = sum(counts[c] for c in BLOCKING)
    not_run = len(analysis.not_run)
    if state == "ABORTED":
        return f"⏹️ Cancelled before it finished — {again} to start again."
    if state == "NOT_RUN" and not ran:
        return (
            f'⚠️ Nothing ran: {not_run} shard(s) could not run on this host (see "Not run") '
            "— nothing was tested, so this is not a pass."
        )
    if counts["NEW"]:
        return (
            f"❌ {counts['NEW']} new failure(s) {'these changes' if local else 'this PR'} "
            f"likely caused — fix them, then {again} (it re-runs only what failed)."
        )
    if blocking:
        what = []
        if counts["PRE-EXISTING"]:
            what.append(f"{counts['PRE-EXISTING']} also failing on base")
        if counts["UNCLASSIFIED"]:
            what.append(f"{counts['UNCLASSIFIED']} with no base to compare")
        return f"❌ {blocking} failure(s) ({', '.join(what)}) — look at them below."
    if counts["INFRA"] and environment_errors:
        return (
            f"🛠️ {environment_errors} shard(s) could not run in their environment "
            "— fix it (see INFRA below); a re-run there fails the same way."
        )
    if counts["INFRA"]:
        return (
            f"🛠️ {counts['INFRA']} infrastructure failure(s) only (timeouts, crashes, "
            f"runtime errors) — {again} to retry; reuse re-runs only what failed."
        )
    flaky = f" ({counts['FLAKY']} flaky test(s) listed below)" if counts["FLAKY"] else ""
    if not_run:
        return (
            f"⚠️ Everything that ran passed{flaky}, but {not_run} shard(s) could not run "
            '(see "Not run") — not a pass.'
        )
    if not gating:
        return f"✅ Everything that ran passed{flaky} — Partly Tested, see below."
    return f"✅ All stages passed{flaky} — nothing to do."
