"""Which tactic a cute kernel launches with: fixed, tuned by measurement, or the default.

Precedence: a tactic pinned with ``fixed_tactic`` (the correctness suite pins one per case, so
every tactic runs); else the tactic measured fastest for the call's key — the kernel, its
compile-time problem and the power-of-two bucket of its row count; else the first tactic of the
dispatcher's list that fits. Measuring happens only inside ``tuning()`` (a warm-up pass, as a
serving engine does before it takes traffic): each candidate runs on scratch outputs and is
timed with CUDA events. Launches are counted per (kernel, tactic) for the suite's report.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager

from stagebot.kernels.cute.tactics import Tactic

WARMUP_RUNS = 3
TIMED_RUNS = 10

_fixed: list[Tactic] = []
_tuning_depth = [0]
_choices: dict[Hashable, Tactic] = {}
measurements: dict[Hashable, dict[str, float]] = {}  # key -> tactic name -> median ms
launched: Counter[tuple[str, str]] = Counter()  # (kernel, tactic name) -> launches


def row_bucket(rows: int) -> int:
    """The smallest power of two >= rows (1 for 0 or 1 rows)."""
    return 1 << max(0, rows - 1).bit_length()


@contextmanager
def fixed_tactic(tactic: Tactic) -> Iterator[None]:
    """Every cute launch inside the block uses ``tactic`` (a call it cannot take is refused)."""
    _fixed.append(tactic)
    try:
        yield
    finally:
        _fixed.pop()


def pinned() -> Tactic | None:
    return _fixed[-1] if _fixed else None


@contextmanager
def tuning() -> Iterator[None]:
    """Calls inside the block measure every fitting tactic for keys not tuned yet."""
    _tuning_depth[0] += 1
    try:
        yield
    finally:
        _tuning_depth[0] -= 1


def median_ms(run: Callable[[], None]) -> float:
    """Median of TIMED_RUNS CUDA-event timings of ``run`` after WARMUP_RUNS untimed calls."""
    import torch

    for _ in range(WARMUP_RUNS):
        run()
    times = []
    for _ in range(TIMED_RUNS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def choose(
    key: Hashable,
    candidates: Sequence[Tactic],
    trial: Callable[[Tactic], None],
    timer: Callable[[Callable[[], None]], float] = median_ms,
) -> Tactic:
    """The tactic for ``key`` among ``candidates`` (non-empty, in preference order).

    ``trial(tactic)`` runs the call with that tactic on scratch outputs; it is timed only when
    tuning and the key has no choice yet. Ties keep the earlier candidate.
    """
    if _fixed:
        return _fixed[-1]
    if key in _choices:
        return _choices[key]
    if not _tuning_depth[0] or len(candidates) == 1:
        return candidates[0]
    timings = {tactic: timer(lambda tactic=tactic: trial(tactic)) for tactic in candidates}
    best = min(candidates, key=lambda tactic: timings[tactic])
    _choices[key] = best
    measurements[key] = {str(tactic): ms for tactic, ms in timings.items()}
    return best


def record_launch(kernel: str, tactic: Tactic) -> None:
    launched[(kernel, str(tactic))] += 1
