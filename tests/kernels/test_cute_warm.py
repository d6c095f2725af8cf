"""Warming the cute kernel cache: compile keys as JSON, the suite's per-case records, the pool
of compile processes, and the NVFP4 suite compiling its recorded kernels before its cases.

The compiles are real (CuTe DSL on the CPU, for sm_90a); a machine without the H200 compiles
but cannot store a kernel (compiled_io.dumps), which the warm report tells apart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import extras

from stagebot.harness.suites.nvfp4_moe import kernel_manifest
from stagebot.kernels.cute import compile as cc
from stagebot.kernels.cute import disk_cache, warm
from stagebot.kernels.cute.tactics import TACTICS, Tactic

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
needs_cutlass = extras.needs("cutlass")


def _key(kernel: str = "grouped_gemm", tactic: Tactic = TACTICS[0], **fields) -> cc.CompileKey:
    shape = dict(n=512, k=512, num_experts=2, tile_size=128, arch="sm_90a")
    return cc.CompileKey(kernel, tactic, cc.DTYPES[kernel], **{**shape, **fields})


def _on_an_h200() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def test_a_compile_key_survives_json_for_every_tactic_and_kernel():
    keys = [_key(kernel, t, mn_limit=True, top_k=8) for kernel in cc.DTYPES for t in TACTICS]
    keys.append(_key(variant="no_dequant"))
    for key in keys:
        assert cc.key_from_json(json.loads(json.dumps(cc.key_to_json(key)))) == key
    stale = {**cc.key_to_json(keys[0]), "retired_field": 1}
    with pytest.raises(TypeError):
        cc.key_from_json(stale)


def test_recording_sees_every_key_asked_for_compiled_or_in_memory(monkeypatch):
    first, second = _key(), _key(n=1024)
    for key in (first, second):
        monkeypatch.setitem(cc._cache, key, object())  # in memory: nothing compiles
    cc.compile_kernel(first)
    with cc.recording() as outer:
        with cc.recording() as inner:  # equal to outer when it ends: the inner one must go
            cc.compile_kernel(second)
        cc.compile_kernel(first)
    cc.compile_kernel(second)
    assert outer == {first, second} and inner == {second}


def test_a_case_record_round_trips_and_a_bad_one_is_dropped(tmp_path):
    keys = [_key(), _key("grouped_gemm_finalize", mn_limit=True, top_k=8)]
    kernel_manifest.write(tmp_path, "suite.py::test_a[1]", keys)
    path = kernel_manifest.record_path(tmp_path, "suite.py::test_a[1]")
    written = path.stat().st_ino  # a rewrite renames a new file into place
    kernel_manifest.write(tmp_path, "suite.py::test_a[1]", reversed(keys))  # the same record
    assert path.stat().st_ino == written
    assert kernel_manifest.read(tmp_path, ["suite.py::test_a[1]", "suite.py::never_ran"]) == {
        "suite.py::test_a[1]": sorted(keys, key=lambda k: json.dumps(cc.key_to_json(k)))
    }
    kernel_manifest.write(tmp_path, "suite.py::test_a[1]", keys[:1])
    assert path.stat().st_ino != written
    assert kernel_manifest.read(tmp_path, ["suite.py::test_a[1]"]) == {
        "suite.py::test_a[1]": keys[:1]
    }
    retired = {**cc.key_to_json(keys[0]), "kernel": "grouped_gemm_retired"}
    path.write_text(json.dumps({"nodeid": "suite.py::test_a[1]", "keys": [retired]}))
    assert kernel_manifest.read(tmp_path, ["suite.py::test_a[1]"]) == {} and not path.exists()
    kernel_manifest.write(tmp_path, "suite.py::other", keys)  # a record under the wrong name
    kernel_manifest.record_path(tmp_path, "suite.py::other").rename(path)
    assert kernel_manifest.read(tmp_path, ["suite.py::test_a[1]"]) == {} and not path.exists()


def test_the_number_of_warm_processes_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(warm.JOBS_ENV, "3")
    assert warm.default_jobs() == 3
    monkeypatch.setenv(warm.JOBS_ENV, "many")
    with pytest.raises(ValueError, match="STAGEBOT_CUTE_WARM_JOBS='many': it must be a whole"):
        warm.default_jobs()
    monkeypatch.delenv(warm.JOBS_ENV)
    assert warm.default_jobs() >= 1


@needs_cutlass
def test_warm_compiles_the_missing_keys_in_worker_processes(tmp_path):
    """Two keys compile in two spawned processes; one already in the folder is left alone.
    Where the kernels cannot be stored (no H200), the first one not stored stops the warm."""
    there = _key(k=1024)
    disk_cache.DiskCache(tmp_path).write(cc.disk_entry_name(there), b"built earlier")
    report = warm.warm([_key(), _key(n=1024), there, _key()], tmp_path, jobs=2)
    assert report.present == 1 and report.jobs == 2 and report.failed == []
    assert (report.stored, report.unstored) == ((2, 0) if _on_an_h200() else (0, 1))


@needs_cutlass
def test_a_key_that_does_not_compile_is_reported_not_raised(tmp_path):
    broken = _key(tactic=Tactic((128, 96)))
    report = warm.warm([broken], tmp_path, jobs=1)
    assert (report.stored, report.unstored) == (0, 0)
    assert report.failed == [
        f"grouped_gemm {broken.tactic}: ValueError: Expected size in shape to be strictly "
        "positive, but got 0"
    ]
    assert "1 failed (first: grouped_gemm tile128x96" in str(report)


def test_no_warm_processes_means_nothing_compiles(tmp_path):
    report = warm.warm([_key(), _key(n=1024)], tmp_path, jobs=0)
    assert (report.present, report.stored, report.unstored, report.failed) == (0, 0, 0, [])


NODEID = "harness/suites/nvfp4_moe/test_grouped_gemms.py::test_grouped_gemm_negative_control_fails"


def _run_case(cache: Path, *options: str, jobs: str = "1", **env: str) -> str:
    env = {"STAGEBOT_CUTE_CACHE_DIR": str(cache), warm.JOBS_ENV: jobs, **env}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", NODEID, "-q", "-p", "no:cacheprovider", *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


class _Asked(Exception):
    """Raised by the stand-in compile: the launch asked for its key (nothing more runs)."""


@needs_cutlass
@pytest.mark.parametrize("limits", [False, True])
def test_a_launch_asks_for_the_key_the_warm_plans_for_its_pinned_case(monkeypatch, limits):
    """A case pinned to the sparse_rows tactic launches without tile limits as its dense twin
    (the same kernel): the launcher's key is the one the warm compiles for that case
    (effective(pinned, mn_limit)), one cache entry for both. With the limits it stays sparse.
    On the H200's first cold stages the launcher keyed the sparse name, so 2-3 kernels a stage
    compiled after the warm had built their twins."""
    import torch

    from stagebot.kernels.cute import launch
    from stagebot.kernels.cute.tactics import effective

    asked = []

    def stand_in(key):
        asked.append(key)
        raise _Asked

    monkeypatch.setattr(launch, "compile_kernel", stand_in)
    sparse = next(t for t in TACTICS if t.sparse_rows)
    m, n, k, experts = 256, 512, 512, 2
    packed = torch.zeros(m, k // 2, dtype=torch.uint8)
    weights = torch.zeros(experts, n, k // 2, dtype=torch.uint8)
    scales = torch.zeros(m * k // 16, dtype=torch.uint8)
    tiles = torch.zeros(m // 128, dtype=torch.int32)
    limit = torch.full((m // 128,), 100, dtype=torch.int32) if limits else None
    with pytest.raises(_Asked):
        launch.grouped_gemm(
            packed, weights, scales, scales, torch.ones(experts), tiles,
            torch.tensor([m // 128], dtype=torch.int32), 128, tile_idx_to_mn_limit=limit,
            tactic=sparse,
        )  # fmt: skip
    (key,) = asked
    assert key.mn_limit is limits
    assert key.tactic == effective(sparse, key.mn_limit)
    assert key.tactic.sparse_rows is limits


@needs_cutlass
def test_the_suite_warms_its_recorded_kernels_with_each_cases_tactic_now(tmp_path):
    """A record names the tactic of an earlier run; the session warms the kernel with the
    tactic the case is pinned to now (here --cute-tactic): already in the folder, so nothing
    compiles. Pinned to a tactic that cannot take the recorded problem, nothing is warmed."""
    recorded = _key(tactic=TACTICS[1], n=4096, k=7168)
    kernel_manifest.write(tmp_path, NODEID, [recorded])
    pinned = TACTICS[2]
    now = replace(recorded, tactic=pinned)
    disk_cache.DiskCache(tmp_path).write(cc.disk_entry_name(now), b"built earlier")
    out = _run_case(tmp_path, "--cute-tactic", str(pinned))
    assert "cute kernels warmed beside the cases: 0 compiled into the cache" in out
    assert "compiling the 1 cute kernels recorded for 1 cases (0 of them from" in out
    assert "1 there already" in out and "not stored" not in out

    (tmp_path / f"{cc.disk_entry_name(now)}{disk_cache.SUFFIX}").unlink()
    out = _run_case(tmp_path, "--cute-tactic", str(pinned))
    stored = "1 compiled into the cache" if _on_an_h200() else "stopped: 1 compiled but not stored"
    assert stored in out

    narrow = next(t for t in TACTICS if t.tile_mn == (128, 256) and not t.fp16_operand)
    kernel_manifest.write(tmp_path, NODEID, [replace(recorded, n=4096 + 128)])  # n % 256 != 0
    assert "warmed" not in _run_case(tmp_path, "--cute-tactic", str(narrow))
    assert "warmed" not in _run_case(tmp_path, "--cute-tactic", str(pinned), jobs="0")

    # A fault inside the warm is a warning; the session and its cases go on.
    out = _run_case(tmp_path, "--cute-tactic", str(pinned), STAGEBOT_CUTE_CACHE_MAX_MB="lots")
    assert "cute kernels not warmed: ValueError" in out and "1 passed" in out


CASE = """
from stagebot.kernels.cute import compile as cc
from stagebot.kernels.cute.tactics import TACTICS


def test_compiles_one_kernel():
    key = cc.CompileKey("grouped_gemm", TACTICS[0], cc.DTYPES["grouped_gemm"], 512, 512, 2, 128,
                        "sm_90a")
    cc.compile_kernel(key)
"""


@needs_cutlass
def test_a_case_that_compiles_is_recorded_and_its_next_session_warms_it(tmp_path):
    """The suite's hooks on a case of their own (the conftest loaded as a plugin): the first
    session records the kernel the case compiled, the second compiles it ahead."""
    (tmp_path / "test_case.py").write_text(CASE)
    cache = tmp_path / "cache"

    def session() -> str:
        done = subprocess.run(
            [
                sys.executable, "-m", "pytest", "test_case.py", "-q", "-p", "no:cacheprovider",
                "-p", "stagebot.harness.suites.nvfp4_moe.conftest",
            ],
            cwd=tmp_path, capture_output=True, text=True, timeout=600,
            env={**os.environ, "STAGEBOT_CUTE_CACHE_DIR": str(cache), warm.JOBS_ENV: "1"},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    assert "warmed" not in session()
    nodeid = "test_case.py::test_compiles_one_kernel"
    key = _key(n=512, k=512, num_experts=2)
    assert kernel_manifest.read(cache, [nodeid]) == {nodeid: [key]}
    out = session()
    if not _on_an_h200():  # the first session could not store it: the second compiles it ahead
        assert "cute kernels warmed beside the cases: 0 compiled" in out
        assert "stopped: 1 compiled but not stored" in out
