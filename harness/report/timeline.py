"""The HTML report's timeline: Gantt bars by slot, one per slot each shard that ran held."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stagebot.harness.report.units import duration_text
from stagebot.harness.results import StageResult

TICK_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14_400, 28_800)


def timeline(
    results: list[StageResult],
    slots: dict[str, list[str]],
    width: int = 900,
    lane_height: int = 26,
) -> dict[str, Any]:
    """Gantt bars by slot: one bar per slot each shard that ran held (x/width in px); ``slots``:
    the slots each stage held (a stage not in it: its GPUs, else the CPU)."""
    spans = []
    for result in results:
        if not result.started_at or not result.finished_at:
            continue
        start = datetime.fromisoformat(result.started_at).timestamp()
        end = datetime.fromisoformat(result.finished_at).timestamp()
        for lane in slots.get(result.stage) or result.gpus or ["CPU"]:
            spans.append((lane, start, max(end, start), result))
    if not spans:
        return {
            "lanes": [],
            "bars": [],
            "ticks": [],
            "width": width,
            "height": lane_height,
            "span": 0,
        }
    t0 = min(s for _, s, _, _ in spans)
    span = max(e for _, _, e, _ in spans) - t0 or 1.0
    lanes = sorted({lane for lane, *_ in spans})
    label = 110
    scale = (width - label - 10) / span
    bars = [
        {
            "lane": lane,
            "y": lanes.index(lane) * lane_height + 4,
            "x": round(label + (start - t0) * scale, 1),
            "w": round(max((end - start) * scale, 3), 1),
            "stage": result.stage,
            "state": result.state,
            "title": f"{result.stage}: {result.state}, {duration_text(result.duration_s)}",
        }
        for lane, start, end, result in spans
    ]
    step = next((s for s in TICK_STEPS_S if span / s <= 6), span)
    ticks = [
        {"x": round(label + t * scale, 1), "label": f"{t:g}s" if t < 60 else duration_text(t)}
        for t in (i * step for i in range(int(span // step) + 1))
    ]
    lanes_height = len(lanes) * lane_height + 8
    return {
        "lanes": [{"name": n, "y": i * lane_height + 4} for i, n in enumerate(lanes)],
        "bars": bars,
        "ticks": ticks,  # the time axis: elapsed time since the first shard started
        "width": width,
        "lanes_height": lanes_height,
        "height": lanes_height + 18,
        "span": duration_text(span),
    }
