"""What fits in a workflow_dispatch's inputs: the matrix travels there (`bot dispatch`)."""

from __future__ import annotations

import json

MAX_MATRIX = 60_000  # workflow_dispatch inputs share a 65,535-character payload
# The dispatch record's key of the one stage run (with no job) of a pipeline that reuses every
# shard: its completion starts the report that publishes them. No stage is named "".
NO_STAGE = ""


def fitting(entries: list, limit: int = MAX_MATRIX) -> list:
    """``entries`` (MatrixEntry), without their reuse-by-key offers when the matrix would not
    fit in a dispatch with them: the tests then run (their keys are still recorded), rather
    than the dispatch being refused."""
    from stagebot.harness.reuse.offers import without_offers

    matrix = json.dumps([entry.to_json() for entry in entries], separators=(",", ":"))
    return entries if len(matrix) <= limit else without_offers(entries)
