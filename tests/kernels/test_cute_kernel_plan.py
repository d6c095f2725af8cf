"""The committed plan of the NVFP4 suite's cute kernels (kernel_plan, cute_kernels.json): it is
recomputed from the case list on the CPU and must equal the committed file; a changed tactic
list or a test's changed GEMMs makes it stale; a fresh machine's warm step compiles it.

The keys' tactics are checked against the kernel classes' predicates, which import CuTe DSL."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import extras

extras.require("torch")  # the suite's case list, which kernel_plan reads, is built with torch

from stagebot.bot.cli.main import cli  # noqa: E402
from stagebot.harness.suites.nvfp4_moe import kernel_plan  # noqa: E402
from stagebot.kernels.cute import compile as cc  # noqa: E402
from stagebot.kernels.cute import tactics, warm  # noqa: E402

pytestmark = [pytest.mark.slow, extras.needs("cutlass")]


@pytest.fixture(scope="module")
def items() -> list[pytest.Item]:
    """The suite, collected once (a collection takes most of a minute); the negative controls
    change what the plan makes of the items, which is where tactics and GEMMs come in."""
    return kernel_plan.collect()


@pytest.fixture(scope="module")
def current(items) -> str:
    return kernel_plan.compute(items)


def test_the_committed_plan_is_the_one_the_case_list_gives(current):
    committed = kernel_plan.PLAN_FILE.read_text(encoding="utf-8")
    assert kernel_plan.stale(committed, current) == ""
    plan = kernel_plan.load(committed)
    # Both DGX_H200-PyTorch shards' dispatched-op cases at GPU scale, each with its GEMMs.
    fused = "test_fused_moe.py::test_fused_moe_matches_the_oracle[cuda-T128-k8-ep8-tile256-"
    keys = {key.kernel: key for key in plan[fused + "fused-finalize]"]}
    swiglu, finalize = keys["grouped_gemm_swiglu"], keys["grouped_gemm_finalize"]
    assert (swiglu.n, swiglu.k, swiglu.num_experts, swiglu.mn_limit) == (4096, 4096, 32, True)
    assert (finalize.n, finalize.k, finalize.top_k, finalize.tile_size) == (4096, 2048, 8, 256)
    assert not finalize.zeroed_output  # fused_moe's finalize zeroes its own output
    assert {key.kernel for key in plan[fused + "unfused-finalize]"]} == {
        "grouped_gemm_swiglu", "grouped_gemm",
    }  # fmt: skip
    assert not any(cid.startswith("test_ops_api.py") or "[cpu-" in cid for cid in plan)


def test_a_changed_tactic_list_makes_the_plan_stale(monkeypatch, items, current):
    """Negative control: the cases' pinned tactics (by their ids' hash) move with the list."""
    monkeypatch.setattr(tactics, "TACTICS", tuple(reversed(tactics.TACTICS)))
    problem = kernel_plan.stale(current, kernel_plan.compute(items))
    assert problem.startswith("cute_kernels.json is stale: ") and "(first: test_" in problem
    assert problem.endswith("`bot kernels record` rewrites it")


def test_a_test_whose_gemms_change_makes_the_plan_stale(monkeypatch, items, current):
    """Negative control: the grouped_gemm op's test passing the tile limits asks for other keys."""
    name = "test_grouped_gemm_matches_the_oracle"
    monkeypatch.setitem(kernel_plan.GEMMS, name, (None, lambda p: [kernel_plan.UNFUSED_ROWS]))
    problem = kernel_plan.stale(current, kernel_plan.compute(items))
    assert f"(first: test_grouped_gemms.py::{name}[cuda-" in problem


def test_a_dispatched_op_test_without_gemms_is_an_error(monkeypatch, items):
    monkeypatch.delitem(kernel_plan.GEMMS, "test_fused_moe_negative_control_fails")
    with pytest.raises(kernel_plan.PlanError, match="has no entry for test_fused_moe_negative"):
        kernel_plan.compute(items)


def test_stale_says_what_is_wrong_with_the_committed_text(current):
    assert kernel_plan.stale("", current).startswith("cute_kernels.json is missing;")
    assert kernel_plan.stale("{}", current).startswith("cute_kernels.json is unreadable (KeyError")
    plan = kernel_plan.load(current)
    first = sorted(plan)[0]
    plan[first] = [replace(key, top_k=3) for key in plan[first]]
    assert f"1 cases' keys differ (first: {first})" in kernel_plan.stale(
        kernel_plan.document(plan), current
    )


def test_bot_kernels_record_writes_the_plan_and_check_fails_on_a_stale_one(
    monkeypatch, tmp_path, current
):
    path = tmp_path / "cute_kernels.json"
    monkeypatch.setattr(kernel_plan, "PLAN_FILE", path)
    monkeypatch.setattr(kernel_plan, "compute", lambda: current)
    checked = CliRunner().invoke(cli, ["kernels", "record", "--check"])
    assert checked.exit_code == 1 and "cute_kernels.json is missing" in checked.output
    assert not path.exists()
    written = CliRunner().invoke(cli, ["kernels", "record"])
    assert written.exit_code == 0, written.output
    assert path.read_text(encoding="utf-8") == current and "rewritten" in written.output
    checked = CliRunner().invoke(cli, ["kernels", "record", "--check"])
    assert checked.exit_code == 0 and "cases, current" in checked.output


CASE = """
from stagebot.kernels.cute import compile as cc
from stagebot.kernels.cute.tactics import TACTICS


def test_compiles_one_kernel():
    key = cc.CompileKey("grouped_gemm", TACTICS[0], cc.DTYPES["grouped_gemm"], 512, 512, 2, 128,
                        "sm_90a")
    cc.compile_kernel(key)
"""
# The suite's hooks with this folder as the suite, PLAN as its plan, and an sm_90 GPU or none.
PLUGIN = """
from pathlib import Path

from stagebot.harness.suites.nvfp4_moe import conftest, kernel_plan

kernel_plan.SUITE_DIR = Path(__file__).resolve().parent
kernel_plan.PLAN_FILE = kernel_plan.SUITE_DIR / "plan.json"
conftest._sm90_here = lambda: {sm90}
"""


def _session(folder: Path, sm90: bool) -> str:
    (folder / "plan_hooks.py").write_text(PLUGIN.format(sm90=sm90))
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "test_case.py", "-q", "-p", "no:cacheprovider",
            "-p", "stagebot.harness.suites.nvfp4_moe.conftest", "-p", "plan_hooks",
        ],
        cwd=folder, capture_output=True, text=True, timeout=600,
        env={**os.environ, "STAGEBOT_CUTE_CACHE_DIR": str(folder / "fresh"), warm.JOBS_ENV: "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_a_fresh_machine_warms_the_committed_plan_and_the_case_checks_it(tmp_path):
    """No cache folder yet: on an sm_90 GPU the session creates it and compiles the case's
    planned kernel beside the case (on the CPU it compiles but cannot store it); the case's
    record matches the plan. A plan that names another key is reported as missing what the case
    asked for; without an sm_90 GPU the plan is not warmed."""
    (tmp_path / "test_case.py").write_text(CASE)
    nodeid = "test_case.py::test_compiles_one_kernel"
    key = cc.CompileKey(
        "grouped_gemm", tactics.TACTICS[0], cc.DTYPES["grouped_gemm"], 512, 512, 2, 128, "sm_90a"
    )
    (tmp_path / "plan.json").write_text(kernel_plan.document({nodeid: [key]}))
    out = _session(tmp_path, sm90=True)
    assert "compiling the 1 cute kernels recorded for 1 cases (1 of them from plan.json)" in out
    on_an_h200 = "1 compiled into the cache" in out
    assert on_an_h200 or "stopped: 1 compiled but not stored" in out
    assert "cute kernel plan: 1 recorded cases, every key in plan.json" in out

    other = replace(key, n=1024)
    (tmp_path / "plan.json").write_text(kernel_plan.document({nodeid: [other]}))
    (tmp_path / "fresh" / "manifests").rename(tmp_path / "records")  # no record: the plan's
    out = _session(tmp_path, sm90=True)
    assert "(1 of them from plan.json)" in out
    assert f"1 of 1 recorded cases asked for 1 keys plan.json lacks (first: {nodeid}: " in out

    (tmp_path / "fresh" / "manifests").rename(tmp_path / "records-2")
    assert "warmed" not in _session(tmp_path, sm90=False)
