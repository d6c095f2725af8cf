"""The cute backend's registration and refusal reasons (CPU: it must never be chosen)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_cute_backend_says_no_on_cpu_tensors_and_auto_keeps_the_reference():
    from stagebot.kernels import backends, reference  # noqa: F401  (registers "reference")
    from stagebot.kernels.cute import backend as cute_backend

    assert backends._registry["cute"].priority > backends._registry["reference"].priority
    a = torch.zeros(128, 32, dtype=torch.uint8)
    ok, why = cute_backend.can_implement("grouped_gemm", a=a)
    assert not ok
    assert "not on a CUDA device" in why
    assert backends.resolve("grouped_gemm", "auto", {"a": a}).name == "reference"


def test_tactic_predicates_are_named_and_composed():
    pytest.importorskip("cutlass")
    from stagebot.kernels.cute.grouped_gemm import Nvfp4GroupedGemmSm90 as K
    from stagebot.kernels.cute.tactics import TACTICS, Tactic

    for tactic in TACTICS:
        assert K.can_implement(tactic, 4096, 7168, 128) == (True, "")
    assert not K.is_valid_cluster(Tactic((128, 128), (2, 1), 4))
    assert not K.is_valid_smem(Tactic((128, 256), (1, 1), 12))
    assert not K.is_valid_problem(Tactic((128, 256), (1, 1), 4), 384, 7168, 128)
    ok, why = K.can_implement(Tactic((128, 128), (1, 1), 4), 4096, 100, 128)
    assert not ok and "K=100" in why


def test_compiled_kernels_are_cached_by_key(monkeypatch):
    from stagebot.kernels.cute import compile as cc
    from stagebot.kernels.cute.tactics import DEFAULT_TACTIC

    key = cc.CompileKey(
        "grouped_gemm", DEFAULT_TACTIC, cc.DTYPES["grouped_gemm"], 256, 256, 2, 128, "sm_90a"
    )
    sentinel = object()
    monkeypatch.setitem(cc._cache, key, sentinel)
    assert cc.compile_kernel(key) is sentinel
