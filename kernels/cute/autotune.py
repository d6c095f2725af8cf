"""Which tactic a cute kernel launches with: fixed, tuned by measurement, or the default.

Precedence: a tactic pinned with ``fixed_tactic`` (the correctness suite pins one per case, so
every tactic runs); else the tactic measured fastest for the call's key — the kernel, its
compile-time problem and the power-of-two bucket of its row count; else the first tactic of the
dispatcher's list that fits. Measuring happens only inside ``tuning()`` (a warm-up pass, as a
serving engine does before it takes traffic) and never while a CUDA graph is being captured:
each candidate runs on scratch outputs, replayed from a CUDA graph so that the host's launch
cost (which at decode sizes rivals the kernel) does not decide. Launches are counted per
(kernel, tactic) for the suite's report.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager

from stagebot.kernels.cute.tactics import Tactic

RUNS_PER_GRAPH = 10
TIMED_REPLAYS = 5

_fixed: list[Tactic] = []
_tuning_depth = [0]
_choices: dict[Hashable, Tactic] = {}
measurements: dict[Hashable, dict[str, float]] = {}  # key -> tactic name -> median ms
failures: dict[Hashable, str] = {}  # key -> why measuring failed (the first candidate then runs)
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
    """GPU time of one ``run``: the median over TIMED_REPLAYS replays of a CUDA graph holding
    RUNS_PER_GRAPH runs (one untimed run first compiles and allocates)."""
    import torch

    run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(RUNS_PER_GRAPH):
            run()
    graph.replay()
    times = []
    for _ in range(TIMED_REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / RUNS_PER_GRAPH)
    return statistics.median(times)


def _capturing() -> bool:
    import torch

    return torch.cuda.is_current_stream_capturing()


def choose(
    key: Hashable,
    candidates: Sequence[Tactic],
    trial: Callable[[Tactic], None],
    timer: Callable[[Callable[[], None]], float] = median_ms,
    capturing: Callable[[], bool] = _capturing,
) -> Tactic:
    """The tactic for ``key`` among ``candidates`` (non-empty, in preference order).

    ``trial(tactic)`` runs the call with that tactic on scratch outputs; it is timed only when
    tuning, not capturing a graph, and the key has no choice yet. Ties keep the earlier one.
    A tactic whose measurement fails (a compile error, a graph capture, running out of memory)
    is recorded in ``failures`` and left out of that key's choice for good; if every one fails,
    the first candidate runs, uncached (the next call measures again): tuning never fails the
    call.
    """
    if _fixed:
        return _fixed[-1]
    if key in _choices:
        return _choices[key]
    if not _tuning_depth[0] or len(candidates) == 1 or capturing():
        return candidates[0]
    timings, errors = {}, []
    for tactic in candidates:
        try:
            timings[tactic] = timer(lambda tactic=tactic: trial(tactic))
        except Exception as error:  # noqa: BLE001  (reported in failures; the call goes on)
            errors.append(f"{tactic}: {type(error).__name__}: {error}")
    if errors:
        failures[key] = "; ".join(errors)
    if not timings:
        return candidates[0]
    best = min(timings, key=timings.__getitem__)  # in candidates' order: ties keep the earlier
    _choices[key] = best
    measurements[key] = {str(tactic): ms for tactic, ms in timings.items()}
    return best


def record_launch(kernel: str, tactic: Tactic) -> None:
    launched[(kernel, str(tactic))] += 1
