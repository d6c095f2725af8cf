"""The op API's argument checks and the backend registry's dispatch rules."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from stagebot.harness.suites.nvfp4_moe.backend_report import BackendTally
from stagebot.kernels import backends, ops
from stagebot.kernels.errors import BackendUnavailableError, KernelArgumentError

U8 = torch.uint8


def _gemm_args(m=128, n=128, k=64, experts=2, **override) -> dict:
    args = {
        "a": torch.zeros(m, k // 2, dtype=U8),
        "b": torch.zeros(experts, n, k // 2, dtype=U8),
        "a_sf": torch.zeros(m * k // 16, dtype=U8),
        "b_sf": torch.zeros(experts, -(-n // 128) * 128 * k // 16, dtype=U8),
        "alpha": torch.ones(experts),
        "tile_idx_to_group_idx": torch.zeros(m // 128, dtype=torch.int32),
        "num_non_exiting_tiles": torch.ones(1, dtype=torch.int32),
        "tile_size": 128,
    }
    args.update(override)
    return args


def _positional(args: dict) -> tuple[list, dict]:
    keywords = {
        k: args.pop(k) for k in ("tile_size", "backend", "tile_idx_to_mn_limit") if k in args
    }
    return list(args.values()), keywords


BAD_GEMM_CALLS = [
    pytest.param(
        {"a": torch.zeros(128, 32, dtype=torch.int8)}, "`a` has dtype torch.int8", id="a dtype"
    ),
    pytest.param(
        {"k": 96},
        "K = 2 * a.shape[1] = 96; it must be a multiple of 64",
        id="K not a multiple of 64",
    ),
    pytest.param({"a": torch.zeros(100, 32, dtype=U8)}, "m = a.shape[0]", id="m not whole tiles"),
    pytest.param({"tile_size": 64}, "`tile_size` is 64", id="tile size"),
    pytest.param(
        {"b": torch.zeros(2, 128, 16, dtype=U8)}, "`b` has shape (2, 128, 16)", id="b K differs"
    ),
    pytest.param({"a_sf": torch.zeros(10, dtype=U8)}, "`a_sf` has 10 elements", id="a_sf size"),
    pytest.param({"b_sf": torch.zeros(2, 3, dtype=U8)}, "`b_sf` has 6 elements", id="b_sf size"),
    pytest.param({"alpha": torch.ones(3)}, "`alpha` has shape (3,)", id="alpha per expert"),
    pytest.param(
        {"alpha": torch.ones(2, dtype=torch.float64)}, "`alpha` has dtype", id="alpha dtype"
    ),
    pytest.param(
        {"tile_idx_to_group_idx": torch.zeros(2, dtype=torch.int32)},
        "`tile_idx_to_group_idx` has shape (2,)",
        id="one group per tile",
    ),
    pytest.param(
        {"num_non_exiting_tiles": torch.ones(1, dtype=torch.int64)},
        "`num_non_exiting_tiles` has dtype",
        id="tile count dtype",
    ),
    pytest.param({"backend": 3}, "`backend` is 3", id="backend type"),
    pytest.param(
        {"backend": "nope"},
        "`backend` is 'nope'; it must be 'auto' or one of",
        id="unknown backend",
    ),
    pytest.param(
        {"tile_idx_to_group_idx": torch.full((1,), 5, dtype=torch.int32)},
        "`tile_idx_to_group_idx` holds values in [5, 5] for the non-exiting tiles; "
        "they must lie in [0, 2)",
        id="group index past the experts",
    ),
    pytest.param(
        {"tile_idx_to_group_idx": torch.full((1,), -3, dtype=torch.int32)},
        "`tile_idx_to_group_idx` holds values in [-3, -3] for the non-exiting tiles",
        id="negative group index",
    ),
    pytest.param(
        {"num_non_exiting_tiles": torch.full((1,), 5, dtype=torch.int32)},
        "`num_non_exiting_tiles` is 5; it must lie in [0, 1]",
        id="more non-exiting tiles than tiles",
    ),
    pytest.param(
        {"num_non_exiting_tiles": torch.full((1,), -1, dtype=torch.int32)},
        "`num_non_exiting_tiles` is -1; it must lie in [0, 1]",
        id="negative tile count",
    ),
    pytest.param(
        {"tile_idx_to_mn_limit": torch.full((1,), 128, dtype=torch.int64)},
        "`tile_idx_to_mn_limit` has dtype torch.int64",
        id="limit dtype",
    ),
    pytest.param(
        {"tile_idx_to_mn_limit": torch.full((2,), 128, dtype=torch.int32)},
        "`tile_idx_to_mn_limit` has shape (2,)",
        id="one limit per tile",
    ),
    pytest.param(
        {"tile_idx_to_mn_limit": torch.full((1,), 200, dtype=torch.int32)},
        "`tile_idx_to_mn_limit` holds values in [200, 200] (minus each tile's first row)",
        id="limit past its tile",
    ),
]


def test_group_ids_of_exiting_tiles_are_not_checked():
    """Entries past the non-exiting tiles are unspecified (moe_sort pads them with 2e9)."""
    groups = torch.tensor([1, 2_000_000_000], dtype=torch.int32)
    positional, keywords = _positional(_gemm_args(m=256, tile_idx_to_group_idx=groups))
    assert ops.grouped_gemm(*positional, **keywords).shape == (256, 128)


@pytest.mark.parametrize(("override", "message"), BAD_GEMM_CALLS)
def test_grouped_gemm_rejects_bad_arguments(override, message):
    positional, keywords = _positional(_gemm_args(**override))
    with pytest.raises(KernelArgumentError) as caught:
        ops.grouped_gemm(*positional, **keywords)
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_swiglu_n_must_be_a_multiple_of_128():
    positional, keywords = _positional(_gemm_args(n=64))
    with pytest.raises(KernelArgumentError, match=r"SwiGLU N = b.shape\[1\].*multiple of 128"):
        ops.grouped_gemm_swiglu(*positional, torch.ones(1), **keywords)


BAD_SMALL_OPS = [
    pytest.param(
        lambda: ops.nvfp4_quantize(torch.zeros(4, 20), 1.0), "K = x.shape[-1]", id="quantize K"
    ),
    pytest.param(
        lambda: ops.nvfp4_quantize(torch.zeros(32), 1.0), "at least 2 dims", id="swizzled 1-D"
    ),
    pytest.param(
        lambda: ops.nvfp4_quantize(torch.zeros(3, 4, 16), torch.ones(2)),
        "`global_scale` has shape (2,)",
        id="one global scale per matrix",
    ),
    pytest.param(
        lambda: ops.nvfp4_dequantize(torch.zeros(4, 8, dtype=U8), torch.zeros(3, dtype=U8), 1.0),
        "`scales` has shape (3,)",
        id="dequantize scales",
    ),
    pytest.param(
        lambda: ops.unswizzle_sf(torch.zeros(10, dtype=U8), 4, 4),
        "`flat` has shape (10,)",
        id="unswizzle",
    ),
    pytest.param(
        lambda: ops.interleave_linear_and_gate(torch.zeros(100, 4), dim=0),
        "multiple of 128",
        id="interleave rows",
    ),
    pytest.param(
        lambda: ops.moe_sort(
            torch.zeros(4, 2, dtype=torch.int32), torch.zeros(4, 2), 8, 2, 6, 4, 128
        ),
        "`local_expert_offset` is 6 with 4 local experts",
        id="local experts out of range",
    ),
    pytest.param(
        lambda: ops.moe_sort(
            torch.full((4, 2), 9, dtype=torch.int32), torch.zeros(4, 2), 8, 2, 0, 4, 128
        ),
        "holds experts in [9, 9]",
        id="expert ids out of range",
    ),
    pytest.param(
        lambda: ops.moe_sort(
            torch.zeros(4, 2, dtype=torch.int32), torch.zeros(4, 3), 8, 2, 0, 4, 128
        ),
        "`token_final_scales` has shape (4, 3)",
        id="router weights shape",
    ),
    pytest.param(
        lambda: ops.moe_unpermute(
            torch.zeros(4, 8), torch.zeros(2, 2, dtype=torch.int64), torch.zeros(2, 2)
        ),
        "`expanded_idx_to_permuted_idx` has dtype torch.int64",
        id="unpermute index dtype",
    ),
    pytest.param(
        lambda: ops.moe_unpermute(
            torch.zeros(4, 8), torch.full((2, 2), 10, dtype=torch.int32), torch.zeros(2, 2)
        ),
        "`expanded_idx_to_permuted_idx` holds values in [10, 10]; they must lie in [-1, 4)",
        id="unpermute index past the rows",
    ),
    pytest.param(
        lambda: ops.moe_unpermute(
            torch.zeros(4, 8), torch.full((2, 2), -2, dtype=torch.int32), torch.zeros(2, 2)
        ),
        "`expanded_idx_to_permuted_idx` holds values in [-2, -2]; they must lie in [-1, 4)",
        id="unpermute index below -1",
    ),
    pytest.param(
        lambda: ops.moe_permute(*_permute_args(p2e=100)),
        "`permuted_idx_to_expanded_idx` holds values in [100, 100] in valid rows; "
        "they must lie in [0, 8)",
        id="permute index past the tokens",
    ),
    pytest.param(
        lambda: ops.moe_permute(*_permute_args(mn_limit=300)),
        "`tile_idx_to_mn_limit` holds values in [300, 300]",
        id="permute mn_limit outside its tile",
    ),
    pytest.param(
        lambda: ops.moe_permute(*_permute_args(nnet=2)),
        "`num_non_exiting_tiles` is 2; it must lie in [0, 1]",
        id="permute tile count",
    ),
    pytest.param(
        lambda: ops.grouped_gemm_finalize(*_finalize_args(p2e=999), num_tokens=4, tile_size=128),
        "`permuted_idx_to_expanded_idx` holds values in [999, 999] in valid rows; "
        "they must lie in [0, 8)",
        id="finalize index past the (token, k) slots",
    ),
    pytest.param(
        lambda: ops.grouped_gemm_finalize(*_finalize_args(p2e=-1), num_tokens=4, tile_size=128),
        "`permuted_idx_to_expanded_idx` holds values in [-1, -1] in valid rows",
        id="finalize valid row without a (token, k)",
    ),
    pytest.param(
        lambda: ops.nvfp4_quantize(torch.ones(1, 16), -1.0, swizzled=False),
        "`global_scale` is -1.0; a global scale must be finite and > 0",
        id="negative global scale",
    ),
    pytest.param(
        lambda: ops.nvfp4_quantize(torch.ones(1, 16), float("nan"), swizzled=False),
        "`global_scale` is nan; a global scale must be finite and > 0",
        id="NaN global scale",
    ),
    pytest.param(
        lambda: ops.nvfp4_quantize(torch.ones(2, 1, 16), torch.tensor([1.0, float("inf")])),
        "`global_scale` holds values in [1.0, inf]; every global scale must be finite and > 0",
        id="infinite global scale of one matrix",
    ),
    pytest.param(
        lambda: ops.nvfp4_dequantize(
            torch.zeros(1, 8, dtype=U8), torch.full((1, 1), 0x38, dtype=U8), 0.0, swizzled=False
        ),
        "`global_scale` is 0.0; a global scale must be finite and > 0",
        id="zero global scale",
    ),
    pytest.param(
        lambda: ops.grouped_gemm_swiglu(
            *_positional(_gemm_args())[0], torch.zeros(1), tile_size=128
        ),
        "`global_sf` holds values in [0.0, 0.0]; every global scale must be finite and > 0",
        id="zero global_sf",
    ),
]


def _permute_args(p2e=0, mn_limit=1, nnet=1) -> tuple:
    """x of 4 tokens (K = 64), top_k 2, one tile of 128 rows with mn_limit valid rows."""
    return (
        torch.zeros(4, 32, dtype=U8),
        torch.zeros(128 * 4, dtype=U8),
        torch.full((1,), mn_limit, dtype=torch.int32),
        torch.full((128,), p2e, dtype=torch.int32),
        torch.full((1,), nnet, dtype=torch.int32),
        128,
        2,
    )


def _finalize_args(p2e=0) -> list:
    positional, _ = _positional(_gemm_args())
    tables = [torch.full((1,), 1, dtype=torch.int32), torch.full((128,), p2e, dtype=torch.int32)]
    return [*positional, *tables, torch.ones(4, 2)]


@pytest.mark.parametrize(("call", "message"), BAD_SMALL_OPS)
def test_table_and_format_ops_reject_bad_arguments(call, message):
    with pytest.raises(KernelArgumentError) as caught:
        call()
    assert message in str(caught.value)


def _fake(name: str, priority: int, able: bool, calls: Counter) -> backends.Backend:
    def run(**args):
        calls[name] += 1
        return name

    def can_implement(op, **args):
        return (True, "") if able else (False, f"{name} needs a GPU")

    return backends.Backend(name, priority, {"grouped_gemm": run}, can_implement)


@pytest.fixture
def fakes(monkeypatch) -> Counter:
    calls: Counter = Counter()
    backends.registered()  # load the built-in backends before adding fakes
    monkeypatch.setitem(backends._registry, "fast", _fake("fast", 100, True, calls))
    monkeypatch.setitem(backends._registry, "unable", _fake("unable", 200, False, calls))
    return calls


def test_auto_runs_the_fastest_backend_that_can_and_records_it(fakes):
    positional, keywords = _positional(_gemm_args())
    with backends.record_dispatch() as log:
        assert ops.grouped_gemm(*positional, **keywords) == "fast"
    assert log == [("grouped_gemm", "fast")] and fakes == {"fast": 1}


def test_naming_an_unable_backend_is_an_error_not_a_fallback(fakes):
    positional, keywords = _positional(_gemm_args())
    with (
        backends.record_dispatch() as log,
        pytest.raises(BackendUnavailableError, match="needs a GPU"),
    ):
        ops.grouped_gemm(*positional, **keywords, backend="unable")
    assert log == [] and not fakes


def test_a_backend_without_the_op_cannot_be_named(fakes):
    positional, keywords = _positional(_gemm_args())
    with pytest.raises(BackendUnavailableError, match="does not implement grouped_gemm_swiglu"):
        ops.grouped_gemm_swiglu(*positional, torch.ones(1), **keywords, backend="fast")


def test_tally_flags_skips_and_other_backends_only_when_forced():
    free = BackendTally(forced=None)
    free.add_ran("a", "fused_moe", {"reference"})
    free.add_skipped("b", "fused_moe", "no GPU")
    assert not free.violations
    assert free.lines()[1].split() == ["fused_moe", "1", "1"]
    forced = BackendTally(forced="cute")
    forced.add_ran("a", "grouped_gemm", {"cute"})
    forced.add_ran("b", "grouped_gemm", {"reference"})
    forced.add_skipped("c", "grouped_gemm", "cute cannot")
    assert [v.split(":")[0] for v in forced.violations] == ["b", "c"]


SUITE = Path(__file__).parent
UNABLE_PLUGIN = """
from stagebot.kernels import backends
backends.register(backends.Backend(
    "unable", 1, {"grouped_gemm": None}, lambda op, **args: (False, "unable needs a GPU")
))
"""


GPU_ONLY_PLUGIN = """
from stagebot.kernels import backends
backends.register(backends.Backend(
    "gpuonly", 1, {"grouped_gemm": None}, lambda op, **args: (True, ""), devices=("cuda",)
))
"""


# Prints the tactic the suite's fixture pinned, from inside each test's call (run with -s).
PIN_REPORT_PLUGIN = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    from stagebot.kernels.cute import autotune
    print(f"pinned {item.name}: {autotune.pinned()}")
    yield
"""


def _run_suites(tmp_path: Path, *runs: list[str]) -> list[subprocess.CompletedProcess]:
    """One pytest process over test_grouped_gemms.py per argument list, all started at once: each
    is mostly torch's import, so where cores are free they take about the time of one."""
    (tmp_path / "unable_backend.py").write_text(UNABLE_PLUGIN)
    (tmp_path / "gpu_only_backend.py").write_text(GPU_ONLY_PLUGIN)
    (tmp_path / "pin_report.py").write_text(PIN_REPORT_PLUGIN)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    # The project plugin is named explicitly, so this works installed or from a PYTHONPATH.
    env = {**os.environ, "PYTHONPATH": path, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    # The runs check collection, option handling and CPU cases only: hiding the GPUs spares each
    # process a CUDA initialisation and leaves what they check as on a machine without one.
    env["CUDA_VISIBLE_DEVICES"] = ""
    suite = str(SUITE / "test_grouped_gemms.py")
    plugins = ["-p", "stagebot.harness.run.pytest_plugin", "-p", "no:cacheprovider"]
    commands = [[sys.executable, "-m", "pytest", suite, "-q", *plugins, *args] for args in runs]
    # Output goes to files, not pipes: no process waits on a pipe nobody reads yet.
    outputs = [(tmp_path / f"run-{i}.out", tmp_path / f"run-{i}.err") for i in range(len(runs))]
    processes = []
    try:
        for command, (out, err) in zip(commands, outputs, strict=True):
            with out.open("w") as stdout, err.open("w") as stderr:
                processes.append(subprocess.Popen(command, stdout=stdout, stderr=stderr, env=env))
        codes = [process.wait(timeout=300) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    return [
        subprocess.CompletedProcess(command, code, out.read_text(), err.read_text())
        for command, code, (out, err) in zip(commands, codes, outputs, strict=True)
    ]


def _run_suite(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return _run_suites(tmp_path, list(args))[0]


# The tests below run the suite in pytest processes with the GPUs hidden: CPU tests, which a
# forced CUDA-only backend (the DGX_H200 stages') deselects with the CPU matrix; each costs a
# few seconds of process start-up and torch imports, and the CPU stages run them.
cpu_only = pytest.mark.on_device("cpu")


@cpu_only
def test_a_forced_backend_that_cannot_run_a_case_skips_it_and_fails_the_session(tmp_path):
    only = "grouped_gemm_matches and cpu-T1-k1-ep1-tile128"
    result = _run_suite(tmp_path, "-p", "unable_backend", "--moe-backend", "unable", "-k", only)
    assert result.returncode == pytest.ExitCode.TESTS_FAILED, result.stdout + result.stderr
    assert "1 skipped" in result.stdout and "unable needs a GPU" in result.stdout
    table = result.stdout.split("cases per op and backend (forced: unable)")[1]
    assert table.split("\n")[2].split() == ["grouped_gemm", "1"]  # op, skipped
    assert "FAIL forced backend" in table


@cpu_only
def test_an_unknown_forced_backend_is_a_usage_error(tmp_path):
    result = _run_suite(tmp_path, "--moe-backend", "nope", "--collect-only")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "--moe-backend 'nope'" in result.stderr


@cpu_only
def test_a_forced_cuda_only_backend_deselects_the_cpu_matrix(tmp_path):
    only = ["-k", "grouped_gemm_matches", "--collect-only"]
    forced = ["-p", "gpu_only_backend", "--moe-backend", "gpuonly"]
    # and this file's tests marked on_device("cpu"), this one among them
    marked = ["--collect-only", str(SUITE / "test_ops_api.py"), "-k", "cuda_only_backend"]
    result, unforced, marked_forced, marked_unforced = _run_suites(
        tmp_path, [*forced, *only], only, [*forced, *marked], marked
    )
    assert result.returncode == pytest.ExitCode.OK, result.stdout + result.stderr
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    assert collected and all("[cuda-" in line for line in collected), collected[:3]
    assert any("[cpu-" in line for line in unforced.stdout.splitlines()), unforced.stdout
    this = "test_a_forced_cuda_only_backend_deselects_the_cpu_matrix"
    assert this in marked_unforced.stdout, marked_unforced.stdout + marked_unforced.stderr
    assert this not in marked_forced.stdout, marked_forced.stdout
    assert "deselected" in marked_forced.stdout, marked_forced.stdout + marked_forced.stderr


@cpu_only
def test_cute_tactic_must_name_a_listed_tactic_and_pins_it(tmp_path):
    from stagebot.kernels.cute.tactics import TACTICS

    case = "test_grouped_gemm_matches_the_oracle[cpu-T1-k1-ep1-tile128]"
    only = ["-p", "pin_report", "-s", "-k", "grouped_gemm_matches and cpu-T1-k1-ep1-tile128"]
    names = [str(t) for t in TACTICS]
    # Two pinned runs of different tactics: at least one differs from the hashed pick, so each
    # reporting its own tactic shows that --cute-tactic overrides the hash.
    assert len(names) >= 2, names
    result, hashed, *pinned = _run_suites(
        tmp_path,
        ["--cute-tactic", "tile64x64", "--collect-only"],
        only,
        *([*only, "--cute-tactic", name] for name in names[:2]),
    )
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "--cute-tactic 'tile64x64'" in result.stderr and str(TACTICS[-1]) in result.stderr
    picks = [line for line in hashed.stdout.splitlines() if line.startswith(f"pinned {case}: ")]
    assert len(picks) == 1 and picks[0].split(": ")[1] in names, hashed.stdout
    for name, run in zip(names[:2], pinned, strict=True):
        assert run.returncode == pytest.ExitCode.OK, run.stdout + run.stderr
        assert f"pinned {case}: {name}" in run.stdout, run.stdout
