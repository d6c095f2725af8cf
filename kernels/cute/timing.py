"""GPU timing shared by the benchmark and the diagnostic runs: medians, host launch cost out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def graph_us(fn: Callable[[], Any], do_bench) -> float | None:
    """Median us per call of ``fn`` replayed from a CUDA graph of 10 calls (None if it fails)."""
    import torch

    try:
        fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(10):
                fn()
        return 1e3 * do_bench(graph.replay, warmup=25, rep=200, return_mode="median") / 10
    except Exception as error:  # some peers cannot be captured: do_bench's figure stands
        print(f"graph capture failed: {error!r}", flush=True)
        return None


def time_us(fn: Callable[[], Any]) -> dict:
    """{us, do_bench_us, graph_us}: the smaller of triton's do_bench median and graph replay."""
    from triton.testing import do_bench

    bench = 1e3 * do_bench(fn, warmup=25, rep=200, return_mode="median")
    graph = graph_us(fn, do_bench)
    return dict(us=min(bench, graph or bench), do_bench_us=bench, graph_us=graph)
