"""The gating commit status a pipeline's report sets, arbitrated between concurrent writers.

``Report.status`` decides the state and text (harness/report/status_text.py words it); this
module decides whether it may be written: only while the newest status of the context is this
pipeline's own (a newer pipeline or a person's skip / reuse is never overwritten). GitHub has no
conditional status write, so the statuses are read again after the write: one that landed
between our read and our write, from a newer pipeline or a person, is posted again on top (two
report jobs of one PR can interleave).
"""

from __future__ import annotations

from stagebot.harness.report.status_text import outranks, owns


def set_gating_status(api, context: str, commit: str | None, number: int, status, url) -> str:
    """Set pipeline ``number``'s ``status`` (a StatusDecision) on ``commit`` unless another
    writer owns the context; returns what happened."""
    if status.state is None:
        return f"status {context!r} left alone: Partly Tested"
    if not commit:
        return "status left alone: no pinned commit"
    before = api.statuses(commit, context)
    if before and not owns(before[0].description, number):
        return (
            f"status {context!r} left alone: its newest value ({before[0].description!r}) "
            "belongs to another pipeline"
        )
    api.set_status(commit, status.state, context, status.description, url)
    line = f"status {context!r} set to {status.state} on {commit[:7]}"
    after = api.statuses(commit, context)
    ours = bool(after) and owns(after[0].description, number)
    between = after[1 : len(after) - len(before)] if ours else []
    newer = next((s for s in between if outranks(s.description, number)), None)
    if newer is not None:
        api.set_status(commit, newer.state, context, newer.description, newer.target_url)
        line += f", then restored {newer.description!r}, which landed in between"
    return line
