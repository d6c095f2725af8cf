"""Which tactic a cute kernel launches with: fixed, tuned by measurement, or the default.

Precedence: a tactic pinned with ``fixed_tactic`` (the correctness suite pins one per case, so
every tactic runs); else the tactic measured fastest for the call's key — the kernel, its
compile-time problem and the power-of-two bucket of its row count; else the first tactic of the
dispatcher's list that fits. Measuring happens only inside ``tuning()`` (a warm-up pass, as a
serving engine does before it takes traffic) and never while a CUDA graph is being captured:
each candidate runs on scratch outputs, replayed from a CUDA graph so that the host's launch
cost (which at decode sizes rivals the kernel) does not decide, and the candidates' replays
take turns, so that a GPU whose clock drifts during the measurement does not favour the ones
timed first (one H200 run, timing them one after the other, picked the plain tactic over `_b16`
for Mixtral's T8192 finalize by 2.5% where `_b16` was 5-6% faster with the other epilogues, and
the fused call then lost to the unfused: NOTES.md, eighth session). Launches are counted per
(kernel, tactic) for the suite's report.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager

from stagebot.kernels.cute.tactics import Tactic

RUNS_PER_GRAPH = 10
TIMED_ROUNDS = 5

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


def graph_sampler(run: Callable[[], None]) -> Callable[[], float]:
    """One untimed ``run`` (it compiles and allocates), then a CUDA graph of RUNS_PER_GRAPH
    runs; returns what times one replay of it, in ms per run."""
    import torch

    run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(RUNS_PER_GRAPH):
            run()
    graph.replay()

    def sample() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / RUNS_PER_GRAPH

    return sample


def _medians(
    candidates: Sequence[Tactic],
    trial: Callable[[Tactic], None],
    sampler: Callable[[Callable[[], None]], Callable[[], float]],
) -> tuple[dict[Tactic, float], list[str]]:
    """Median ms per candidate over TIMED_ROUNDS rounds, each round sampling every candidate
    once, and "tactic: Error: message" for each candidate that failed (left out)."""
    samplers, errors = {}, []
    for tactic in candidates:
        try:
            samplers[tactic] = sampler(lambda tactic=tactic: trial(tactic))
        except Exception as error:  # noqa: BLE001  (reported in failures; the call goes on)
            errors.append(f"{tactic}: {type(error).__name__}: {error}")
    samples: dict[Tactic, list[float]] = {tactic: [] for tactic in samplers}
    for _ in range(TIMED_ROUNDS):
        for tactic, sample in samplers.items():
            samples[tactic].append(sample())
    return {tactic: statistics.median(times) for tactic, times in samples.items()}, errors


def _capturing() -> bool:
    import torch

    return torch.cuda.is_current_stream_capturing()


def choose(
    key: Hashable,
    candidates: Sequence[Tactic],
    trial: Callable[[Tactic], None],
    sampler: Callable[[Callable[[], None]], Callable[[], float]] = graph_sampler,
    capturing: Callable[[], bool] = _capturing,
) -> Tactic:
    """The tactic for ``key`` among ``candidates`` (non-empty, in preference order).

    ``trial(tactic)`` runs the call with that tactic on scratch outputs; it is timed only when
    tuning, not capturing a graph, and the key has no choice yet. Ties keep the earlier one.
    A tactic that fails to run or to be captured (a compile error, running out of memory) is
    recorded in ``failures`` and left out of that key's choice for good; if every one fails,
    the first candidate runs, uncached (the next call measures again): tuning never fails the
    call. Every candidate's graph is alive until the choice is made.
    """
    if _fixed:
        return _fixed[-1]
    if key in _choices:
        return _choices[key]
    if not _tuning_depth[0] or len(candidates) == 1 or capturing():
        return candidates[0]
    timings, errors = _medians(candidates, trial, sampler)
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
