"""bench_moe --layer (the whole MoE layer against the torch compositions) without a GPU: its
arguments, its summary from a saved run, and its compositions and checks on the CPU, ours on
the reference backend through the same unchecked pipeline the GPU run times."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers import extras

torch = extras.require("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from stagebot.kernels import moe_pipeline, ops  # noqa: E402
from stagebot.kernels.cute import bench_layer, bench_moe, timing, torch_moe  # noqa: E402

TINY = bench_moe.Layer("Tiny ", experts=16, local_experts=4, top_k=4, hidden=128, inter=64)


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stagebot.kernels.cute.bench_moe", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_layers_are_the_three_at_four_token_counts():
    names = [c.name for c in bench_layer.cases(quick=False)]
    assert len(names) == 12 and names[:4] == [
        "T16 layer",
        "T128 layer",
        "T1024 layer",
        "T8192 layer",
    ]
    assert "Qwen3-30B-A3B T1024 layer" in names and names[-1] == "Mixtral-8x7B T8192 layer"
    assert [c.name for c in bench_layer.select(True, [])] == ["T16 layer"]
    assert [c.name for c in bench_layer.select(False, ["Qwen3", "T8192"])] == [
        "Qwen3-30B-A3B T8192 layer"
    ]


def test_a_layer_filter_that_matches_nothing_is_a_usage_error():
    done = _bench("--layer", "--only", "Qwen3", "--only", "T77")
    assert done.returncode == 2, done.stderr
    assert "--only Qwen3 T77 matches no layer; the layers are: T16 layer, T128 layer" in done.stderr
    assert "Traceback" not in done.stderr


SAVED = {
    "device": "NVIDIA H200",
    "cases": [
        {
            "name": "Qwen3-30B-A3B T8192 layer",
            "layer": "Qwen3-30B-A3B",
            "tokens": 8192,
            "rows": 65536,
            "impls": {
                "ours": {"us": 2048.0, "check": {"ok": True, "rel_err_f32": 0.16}},
                "ours, fill inside": {"us": 2100.0, "check": {"ok": True, "rel_err_f32": 0.16}},
                "bf16 torch": {"us": 4096.0, "check": {"ok": True, "rel_err_f32": 0.005}},
                "fp8 torch": {"us": 3072.0, "check": {"ok": True, "rel_err_f32": 0.065}},
            },
        },
        {
            "name": "T16 layer",
            "layer": bench_layer.FIRST_LAYER,
            "tokens": 16,
            "rows": 5,
            "impls": {
                "ours": {"us": 100.0, "check": {"ok": True, "rel_err_f32": 0.15}},
                "bf16 torch": {"us": 400.0, "check": {"ok": False, "rel_err_f32": 0.5}},
                "fp8 torch": {"error": "RuntimeError: no kernel"},
            },
        },
    ],
}


def test_the_summary_gives_tokens_per_second_and_each_peers_ratio():
    header, rule, qwen, first = bench_layer.summary_lines(SAVED)
    assert header.startswith(
        "| layer | tokens | local rows | ours us | ours tokens/s | fill inside us | inside / ours |"
    )
    assert rule.count("|") == header.count("|")
    assert qwen == (
        "| Qwen3-30B-A3B | 8192 | 65536 | 2048.0 | 4,000,000 | 2100.0 | 1.03 | 4096.0 | 3072.0 "
        "| 2.00 | 1.50 "
        "| 0.1600 / 0.0050 / 0.0650 | ok |"
    )
    # A peer that errored has no time and no ratio, and marks the row; a failed check fails it.
    assert first == (
        f"| {bench_layer.FIRST_LAYER} | 16 | 5 | 100.0 | 160,000 | - | - | 400.0 | - | 4.00 | - "
        "| 0.1500 / 0.5000 / - | error |"
    )
    del SAVED["cases"][1]["impls"]["fp8 torch"]
    assert bench_layer.summary_lines(SAVED)[3].endswith("| - | 0.1500 / 0.5000 / - | FAIL |")


def test_the_summary_is_reprinted_from_a_saved_layer_run(tmp_path):
    saved = tmp_path / "bench_layer.json"
    saved.write_text(json.dumps(SAVED))
    done = _bench("--summary", str(saved))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == bench_layer.summary_lines(SAVED)
    saved.write_text(json.dumps({"cases": [{"name": "T16 layer"}]}))
    done = _bench("--summary", str(saved))
    assert done.returncode == 2 and "not the bench_moe.json or bench_layer.json" in done.stderr


@pytest.fixture(scope="module")
def on_the_cpu():
    """bench_layer builds on the CPU and runs ours on the reference backend."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bench_moe, "DEVICE", "cpu")
        patch.setattr(bench_layer, "OURS_BACKEND", "reference")
        yield patch


@pytest.fixture(scope="module")
def tiny(on_the_cpu):
    """A layer of 16 experts, 4 local, top-4, at 40 tokens."""
    problem = bench_layer.build(bench_layer.Case(TINY, 40), seed=0)
    return problem, bench_layer.references(problem)


def _time_by_wall_clock(monkeypatch, captured):
    """timing.time_us by the wall clock; a graph replay "captured" or not."""

    def wall_clock_us(fn):
        start = time.perf_counter()
        fn()
        us = (time.perf_counter() - start) * 1e6
        return dict(us=us, do_bench_us=us, graph_us=us if captured else None)

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "CPU")
    monkeypatch.setattr(bench_moe, "warm_kernels", lambda shapes: "not warmed")
    monkeypatch.setattr(timing, "time_us", wall_clock_us)


def test_a_run_writes_every_implementations_row_and_fails_on_an_error(
    on_the_cpu, monkeypatch, tmp_path
):
    """The GPU run's path on the CPU, timed by the wall clock: fp8 has no CPU kernel, so its
    error marks the row and the run fails, and the other two stand, checked and timed."""

    _time_by_wall_clock(monkeypatch, captured=True)
    assert bench_layer.run([bench_layer.Case(TINY, 40)], tmp_path) == 1
    saved = json.loads((tmp_path / "bench_layer.json").read_text())
    (case,) = saved["cases"]
    assert case["layer"] == "Tiny" and case["tokens"] == 40 and 0 < case["rows"] < 40 * 4
    assert case["impls"]["ours"]["check"]["ok"] and case["impls"]["bf16 torch"]["check"]["ok"]
    assert case["impls"]["ours"]["tokens_per_s"] > 0
    assert "_scaled_grouped_mm" in case["impls"]["fp8 torch"]["error"]
    assert saved["errors"] == [f"Tiny T40 layer / fp8 torch: {case['impls']['fp8 torch']['error']}"]
    assert bench_layer.summary_lines(saved)[2].endswith(" / - | error |")


def test_a_layer_timed_without_its_graph_is_an_error(on_the_cpu, monkeypatch, tmp_path):
    """A layer that cannot be captured is timed eagerly, host launches included: its row says
    so instead of standing beside the peers' replayed times."""
    _time_by_wall_clock(monkeypatch, captured=False)
    assert bench_layer.run([bench_layer.Case(TINY, 40)], tmp_path) == 1
    saved = json.loads((tmp_path / "bench_layer.json").read_text())
    ours = saved["cases"][0]["impls"]["ours"]
    assert ours["check"]["ok"] and ours["graph_us"] is None
    assert f"Tiny T40 layer / ours: {ours['error']}" in saved["errors"]
    assert "not captured in a CUDA graph" in ours["error"]


def test_ours_and_the_bf16_composition_pass_their_checks(tiny):
    problem, want = tiny
    unrouted = (want["f32"] == 0).all(dim=1)
    assert 0 < int(unrouted.sum()) < 40  # some tokens reach no local expert
    for name in ("ours", "bf16 torch"):
        got = bench_layer.IMPLS[name](problem)()
        verdict = bench_layer.check(name, got, want)
        assert verdict["ok"], (name, verdict)
        assert (got[unrouted] == 0).all()
    assert bench_layer.check("ours", bench_layer.IMPLS["ours"](problem)(), want)["rel_err"] == 0


def _with_router_weights_flipped(monkeypatch):
    route = torch_moe.route

    def flipped(x, router, top_k):
        experts, weights = route(x, router, top_k)
        return experts, weights.flip(-1)

    monkeypatch.setattr(torch_moe, "route", flipped)


@pytest.mark.parametrize("name", ["ours", "bf16 torch"])
def test_a_layer_that_weighs_the_wrong_rows_fails_its_check(tiny, monkeypatch, name):
    problem, want = tiny
    _with_router_weights_flipped(monkeypatch)
    assert not bench_layer.check(name, bench_layer.IMPLS[name](problem)(), want)["ok"]


@pytest.mark.parametrize("unfused", [False, True])
def test_the_unchecked_pipeline_computes_what_the_op_api_does(tiny, unfused):
    problem, _ = tiny
    experts, weights = torch_moe.route(problem.x, problem.router, TINY.top_k)
    args = dict(
        problem.nvfp4,
        x=problem.x,
        token_selected_experts=experts,
        token_final_scales=weights,
        disable_finalize_fusion=unfused,
        backend="reference",
    )
    checked = ops.fused_moe(**args)
    assert torch.equal(moe_pipeline.fused_moe(**args, checked=False), checked)
    assert torch.equal(moe_pipeline.fused_moe(**args), checked)


class _InPlaceCopies(TorchDispatchMode):
    """Records each aten.copy_ dispatched inside the block."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.copy_.default:
            self.seen.append(tuple(a.shape for a in args[:2]))
        return func(*args, **(kwargs or {}))


def test_the_steps_before_the_gemms_copy_nothing_in_place(tiny):
    """On a CUDA tensor ``t[i] = value`` is a copy from a host scalar, which CUDA graph capture
    refuses, and the layer benchmark replays ours from a graph: quantise, sort and permute (the
    steps every backend shares) issue no copy_."""
    problem, _ = tiny
    steps = moe_pipeline.unchecked_steps("reference")
    experts, _ = torch_moe.route(problem.x, problem.router, TINY.top_k)
    with _InPlaceCopies() as copies:
        x_fp4, x_sf = steps.quantize(problem.x, problem.nvfp4["fc1_input_gs"])
        tables = steps.sort(experts, 0, TINY.local_experts, bench_moe.TILE)
        steps.permute(
            x_fp4,
            x_sf,
            tables.tile_idx_to_mn_limit,
            tables.permuted_idx_to_expanded_idx,
            tables.num_non_exiting_tiles,
            bench_moe.TILE,
            TINY.top_k,
        )
    assert copies.seen == []
    with _InPlaceCopies() as copies:  # the control: what the sort once did
        torch.zeros(3, dtype=torch.long)[2] = 0
    assert copies.seen == [(torch.Size([]), torch.Size([]))]


def test_unpermute_reduce_leaves_out_the_rows_past_the_valid_ones():
    rows = torch.tensor([[1.0, 2.0], [3.0, 4.0], [float("nan"), 0.0]], dtype=torch.bfloat16)
    token, weight = torch.tensor([1, 1, 0]), torch.tensor([0.5, 0.25, 1.0])
    out = torch_moe.unpermute_reduce(rows, token, weight, 3, torch.tensor(2))
    assert out.tolist() == [[0.0, 0.0], [1.25, 2.0], [0.0, 0.0]]
    assert torch_moe.unpermute_reduce(rows, token, weight, 3)[0].isnan().any()


def test_fp8_rowwise_keeps_each_row_within_e4m3_rounding():
    t = torch.randn(6, 64) * torch.logspace(-3, 3, 6).unsqueeze(1)
    codes, scale = torch_moe.fp8_rowwise(t)
    assert codes.dtype == torch.float8_e4m3fn and scale.shape == (6,)
    back = codes.float() * scale.unsqueeze(1)
    assert (back - t).abs().max(dim=1).values.le(t.abs().amax(dim=1) / 16).all()
    assert codes.float().abs().amax(dim=1).eq(torch_moe.FP8_MAX).all()


def test_the_finalize_fair_peer_adds_each_row_into_its_token(monkeypatch):
    """bench_moe's "+ op" peer after the reference GEMM's valid rows is the reference finalize."""
    monkeypatch.setattr(bench_moe, "DEVICE", "cpu")
    shape = bench_moe.layer_shapes(TINY, 40)[1]
    p = bench_moe.build_problem(shape, seed=1)

    def gemm_rows(p):
        rows = ops.grouped_gemm(**p.op_args["grouped_gemm"], backend="reference")
        return lambda: rows[p.valid]

    got = bench_moe._with_replaced_op(gemm_rows, fp8=False)(p)()
    assert bench_moe.compare(got, bench_moe.reference(p))["ok"]
    wrong = bench_moe._with_replaced_op(lambda p: lambda: gemm_rows(p)().flip(0), fp8=False)(p)()
    assert not bench_moe.compare(wrong, bench_moe.reference(p))["ok"]
