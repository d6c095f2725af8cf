"""bench_moe's one-row-per-shape table, and its reprint from a saved run (no GPU needed)."""

from __future__ import annotations

import json
import subprocess
import sys

from stagebot.kernels.cute.bench_moe import measure_impl, summary_lines, tactic_cell

RESULTS = {
    "shapes": [
        {
            "name": "S1 8x8192 N=K=4096",
            "kind": "plain",
            "flops": 2.0 * 8 * 8192 * 4096 * 4096,
            "impls": {
                "ours": {
                    "us": 3600.0,
                    "check": {"ok": True},
                    "tactics": {"grouped_gemm": "tile128x256_cluster1x1_stages4"},
                },
                "bf16 peer": {"us": 3240.0},
                "fp8 peer": {"us": 1800.0},
            },
        },
        {
            "name": "T16 GEMM2 finalize",
            "kind": "finalize",
            "flops": 1.0,
            "impls": {
                "ours fused": {
                    "us": 28.0,
                    "check": {"ok": True},
                    "tactics": {"grouped_gemm_finalize": "tile8x128_cluster1x1_stages4_swapab"},
                },
                "ours fused, out zeroed aside": {
                    "us": 25.9,
                    "check": {"ok": True},
                    "tactics": {"grouped_gemm_finalize": "tile32x128_cluster1x1_stages2_swapab"},
                },
                "ours unfused": {"us": 29.4, "check": {"ok": True}},
                "unfused GEMM step": {"us": 26.5},
                "ours fused det": {"us": 56.0, "check": {"ok": False}},
                "bf16 peer": {"us": 103.6},
                "fp8 peer": {"error": "RuntimeError: no kernel"},
                "bf16 peer + op": {"us": 112.0},
                "fp8 peer + op": {"us": 70.0},
            },
        },
    ]
}


def test_each_shape_is_one_row_with_its_ratios_and_checks():
    header, rule, s1, finalize = summary_lines(RESULTS)
    assert header.startswith("| shape | ours fused | unfused (GEMM step) | det |")
    assert "| bf16 + op | fp8 + op | x bf16 + op | x fp8 + op |" in header
    assert "| fused, out zeroed aside (kernel only) | x bf16 (zeroed aside) | check |" in header
    assert rule.count("|") == header.count("|")
    assert s1 == (
        "| S1 8x8192 N=K=4096 | 3600.0 (610.8 TF/s) | - | - | 3240.0 | 1800.0 | 0.90 | 0.50 "
        "| - | - | - | - | - | - | - | ok | tile128x256_cluster1x1_stages4 |"
    )
    # A failed check anywhere fails the row; a peer that errored has no time and no ratio.
    assert finalize == (
        "| T16 GEMM2 finalize | 28.0 | 29.4 (26.5) | 56.0 | 103.6 | - | 3.70 | - "
        "| 112.0 | 70.0 | 4.00 | 2.50 | 1.05 | 25.9 | 4.00 | error "
        "| tile8x128_cluster1x1_stages4_swapab "
        "(zeroed aside: tile32x128_cluster1x1_stages2_swapab) |"
    )
    RESULTS["shapes"][1]["impls"]["fp8 peer"] = {"us": 54.0}
    assert (
        "| 1.93 | 112.0 | 70.0 | 4.00 | 2.50 | 1.05 | 25.9 | 4.00 | FAIL |"
        in summary_lines(RESULTS)[3]
    )


def test_the_tactic_cell_names_the_zeroed_kernel_only_where_it_differs():
    fused = {"tactics": {"grouped_gemm_finalize": "A"}}
    assert tactic_cell({"ours fused": fused}, "ours fused") == "A"
    same = {"ours fused": fused, "ours fused, out zeroed aside": fused}
    assert tactic_cell(same, "ours fused") == "A"
    # a run saved before the tactics were recorded
    assert tactic_cell({"ours fused": {"us": 1.0}}, "ours fused") == "-"


def test_an_implementation_records_the_tactics_it_launched(monkeypatch):
    """measure_impl keeps the tactics of the cute launches its own calls made (the autotuner's
    choice), not those of launches before it; an implementation without one has none."""
    from stagebot.kernels.cute import autotune, timing
    from stagebot.kernels.cute.tactics import TACTICS

    def one_call(fn):
        fn()
        return {"us": 1.0}

    monkeypatch.setattr(timing, "time_us", one_call)
    monkeypatch.setattr(autotune, "launched", autotune.launched.copy())
    autotune.record_launch("grouped_gemm", TACTICS[1])  # an earlier implementation's
    launch = lambda: autotune.record_launch("grouped_gemm_finalize", TACTICS[6])  # noqa: E731
    errors: list[str] = []
    result = measure_impl(None, lambda p: launch, None, errors, "ours fused")
    assert result == {"us": 1.0, "tactics": {"grouped_gemm_finalize": str(TACTICS[6])}}
    peer = measure_impl(None, lambda p: lambda: None, None, errors, "bf16 peer")
    assert peer == {"us": 1.0} and not errors


def _summary(path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "stagebot.kernels.cute.bench_moe", "--summary", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_summary_is_reprinted_from_a_saved_run(tmp_path):
    saved = tmp_path / "bench_moe.json"
    saved.write_text(json.dumps(RESULTS))
    done = _summary(saved)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == summary_lines(RESULTS)


def test_a_summary_of_a_missing_or_foreign_file_is_a_usage_error(tmp_path):
    done = _summary(tmp_path / "absent.json")
    assert done.returncode == 2 and "absent.json: cannot be read (No such file" in done.stderr
    foreign = tmp_path / "other.json"
    foreign.write_text('{"device": "x"}')
    done = _summary(foreign)
    assert done.returncode == 2
    assert "not the bench_moe.json or bench_layer.json of a run (KeyError('shapes'))" in done.stderr
    assert "Traceback" not in done.stderr
