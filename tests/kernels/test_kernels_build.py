"""`bot kernels build`: the AoT compile check of the CuTe kernels (CPU only, no GPU needed)."""

from __future__ import annotations

import re
import types

import pytest
from click.testing import CliRunner
from helpers import extras

pytestmark = [pytest.mark.slow, extras.needs("cutlass")]


def _build(*args: str):
    from stagebot.bot.cli.local.kernels import kernels

    return CliRunner().invoke(kernels, ["build", *args])


def test_default_tactic_per_kernel_compiles_with_wgmma():
    result = _build("--arch", "sm_90a")
    assert result.exit_code == 0, result.output
    assert "wgmma.mma_async x" in result.output
    assert "compiled 4 of 4 (kernel, tactic) builds for sm_90a" in result.output


def test_every_tactic_of_the_dispatcher_compiles():
    """What CI runs: each kernel x each tactic, the decode ones (swap_ab, no fp16 operand) with
    mma.sync, the others (the RS kernel's included) with WGMMA."""
    from stagebot.bot.cli.local.kernels import KERNELS
    from stagebot.kernels.cute.tactics import TACTICS

    result = _build("--arch", "sm_90a", "--all-tactics")
    assert result.exit_code == 0, result.output
    builds = len(KERNELS) * len(TACTICS)
    assert f"compiled {builds} of {builds} (kernel, tactic) builds for sm_90a" in result.output
    decode = [t for t in TACTICS if t.swap_ab and not t.fp16_operand]
    assert decode
    for tactic in decode:
        assert f"{tactic}" in result.output
    assert result.output.count("mma.sync.aligned.m16n8k16 x") == len(KERNELS) * len(decode)
    assert result.output.count("wgmma.mma_async x") == len(KERNELS) * (len(TACTICS) - len(decode))


def test_a_tactic_the_predicates_reject_fails_the_build():
    result = _build("--tactic", "128x96:1x1:4")
    assert result.exit_code == 1
    assert "FAIL grouped_gemm tile128x96_cluster1x1_stages4" in result.output
    assert "tile 128x96 must be 128 x (128 | 256)" in result.output


def test_a_tactic_that_does_not_fit_in_smem_fails_the_build():
    result = _build("--tactic", "128x256:1x1:12")
    assert result.exit_code == 1
    assert "B of shared memory; sm_90 allows 232448 B" in result.output


def test_a_compiler_failure_fails_the_build(monkeypatch):
    from stagebot.kernels.cute import compile as cute_compile

    def broken(key, *, keep_ptx=False):
        raise RuntimeError("deliberately broken")

    monkeypatch.setattr(cute_compile, "compile_kernel", broken)
    result = _build("--arch", "sm_90a")
    assert result.exit_code == 1
    assert "compile failed: RuntimeError: deliberately broken" in result.output


def test_a_wait_with_a_constant_phase_fails_the_build(monkeypatch):
    """A pipeline state advanced outside the loop body is not carried across turns: its wait
    takes a literal phase and the kernel hangs on the H200 once the ring wraps (as 3d8b19a
    did). Planted here by giving the real PTX's first wait phase 0."""
    from stagebot.kernels.cute import compile as cute_compile

    real = cute_compile.compile_kernel
    wait = re.compile(r"(mbarrier\.try_wait\.parity\S*\s+\S+\s+\[[^\]]+\],\s*)%r\d+")

    def constant_phase(key, *, keep_ptx=False):
        ptx = real(key, keep_ptx=keep_ptx).__ptx__
        planted = wait.sub(r"\g<1>0", ptx, count=1)
        assert planted != ptx
        return types.SimpleNamespace(__ptx__=planted)

    monkeypatch.setattr(cute_compile, "compile_kernel", constant_phase)
    result = _build("--tactic", "128x256:1x1:4")
    assert result.exit_code == 1
    assert result.output.count("an mbarrier wait has a constant phase") == 4, result.output


def test_ptxas_refuses_a_kernel_whose_wgmmas_it_serialises():
    """The 256-token RS kernel gives its producer warp a warpgroup that hands registers to the
    consumers (setmaxnreg): assembled as a 288-thread CTA without setmaxnreg, as first
    written, ptxas caps it at 168 registers and serialises its WGMMAs (C7512), which the build
    must refuse."""
    from stagebot.bot.cli.local.kernels import build_one, ptxas_path, ptxas_report
    from stagebot.kernels.cute import compile as cute_compile
    from stagebot.kernels.cute.tactics import TACTICS

    if ptxas_path() is None:
        pytest.skip("no ptxas (neither on the PATH nor in Triton's package)")
    wide = next(t for t in TACTICS if t.swap_ab and t.fp16_operand and t.tile_mn[0] == 256)
    ok, detail = build_one("grouped_gemm_finalize", wide, "sm_90a")
    assert ok and "0 B spilled" in detail, detail
    key = cute_compile.CompileKey(
        "grouped_gemm_finalize", wide, cute_compile.DTYPES["grouped_gemm_finalize"], 7168,
        2048, 8, 128, "sm_90a", mn_limit=True, top_k=8,
    )  # fmt: skip
    ptx = cute_compile.compile_kernel(key, keep_ptx=True).__ptx__
    assert ".reqntid 384, 1, 1" in ptx and ptx.count("setmaxnreg") == 2
    first_written = re.sub(r"\n\s*setmaxnreg[^\n]*", "", ptx).replace(
        ".reqntid 384,", ".reqntid 288,"
    )
    ok, detail = ptxas_report(first_written, "sm_90a")
    assert not ok and "(C7512)" in detail and "serialized" in detail, detail


def test_setmaxnreg_budgets_above_the_launch_allocation_are_refused(monkeypatch):
    """setmaxnreg.inc waits until the registers the producer warpgroup gave back cover it: a
    budget above the launch's allocation (168 x 384 here) waits forever. A drain warp tried at
    48 / 232 hung on the H200; the kernel refuses such budgets when it is built."""
    from stagebot.kernels.cute import rs_gemm
    from stagebot.kernels.cute.tactics import TACTICS

    wide = next(t for t in TACTICS if t.swap_ab and t.fp16_operand and t.tile_mn[0] == 256)
    rs_gemm.Nvfp4RsGemmSm90(wide, "finalize")  # 40 / 232: exactly the allocation
    monkeypatch.setattr(rs_gemm, "PRODUCER_REGS", 48)
    with pytest.raises(AssertionError):
        rs_gemm.Nvfp4RsGemmSm90(wide, "finalize")


def _finalize_ptx(tactic, variant: str = "", zeroed_output: bool = False) -> str:
    from stagebot.kernels.cute import compile as cute_compile

    key = cute_compile.CompileKey(
        "grouped_gemm_finalize", tactic, cute_compile.DTYPES["grouped_gemm_finalize"], 512,
        256, 8, 128, "sm_90a", mn_limit=True, top_k=8, variant=variant,
        zeroed_output=zeroed_output,
    )  # fmt: skip
    return cute_compile.compile_kernel(key, keep_ptx=True).__ptx__


ADDS, MARKS = "red.global.add.noftz", "atom.relaxed.gpu.global.exch"  # bf16x2 adds, v4 or not
MARK_READS, WAITS = "ld.relaxed.gpu", "ld.acquire.gpu"


def test_the_finalize_diagnostic_builds_leave_out_what_they_name():
    """gpu_check's finalize split: "no_adds" has no bf16 atomics, "no_unrouted" no reads of
    the marks (phase B); the kernel for an output zeroed aside (fused_moe's) neither marks the
    tokens nor reads the marks, and only adds; the kernel has all three."""
    from stagebot.kernels.cute.tactics import TACTICS

    wide = next(t for t in TACTICS if t.swap_ab and t.fp16_operand and t.tile_mn[0] == 256)
    found = {}
    for variant, zeroed in (("", False), ("no_adds", False), ("", True), ("no_unrouted", False)):
        ptx = _finalize_ptx(wide, variant, zeroed)
        found[variant or ("zeroed" if zeroed else "kernel")] = (
            ADDS in ptx, MARKS in ptx, MARK_READS in ptx
        )  # fmt: skip
    assert found == {
        "kernel": (True, True, True),
        "no_adds": (False, True, True),
        "zeroed": (True, False, False),
        "no_unrouted": (True, True, False),
    }


def test_the_drain_build_hands_each_item_over_through_two_matched_barriers():
    """The 256-token RS finalize's drain build: the consumers wait on EMPTY (id 2) and arrive
    on FULL (id 3), warps 9-11 the other way round, each barrier counting all 352 threads; the
    drain adds the consumers' bf16 bits (no conversion before its atomics). The kernel has
    neither barrier; the drain_no_adds diagnostic has both and adds nothing."""
    from stagebot.kernels.cute.gpu_check import DRAIN, RS256

    drain, kernel = _finalize_ptx(RS256, DRAIN), _finalize_ptx(RS256)
    idle = _finalize_ptx(RS256, "drain_no_adds")
    handover = {f"bar.{op} {i}, 352" for op in ("sync", "arrive") for i in (2, 3)}
    assert {line for line in handover if line in drain} == handover
    assert {line for line in handover if line in idle} == handover
    assert not any(f"bar.{op} {i}," in kernel for op in ("sync", "arrive") for i in (2, 3))
    bits_add = re.compile(r"red\.global\.add\.noftz\.v4\.bf16x2 \[%rd\d+\], \{%r\d+,")
    assert bits_add.search(drain) and not bits_add.search(kernel)
    assert ADDS not in idle


def test_the_wgmma_finalize_for_a_zeroed_output_neither_fills_nor_waits():
    """The WGMMA kernel's fill (token marks) and its consumers' wait for phase A (acquire
    loads) are gone from the build for an output zeroed aside; its adds stay."""
    from stagebot.kernels.cute.tactics import TACTICS

    wgmma = next(t for t in TACTICS if not t.swap_ab and not t.fp16_operand)
    filled, zeroed = _finalize_ptx(wgmma), _finalize_ptx(wgmma, zeroed_output=True)
    assert (ADDS in filled, MARKS in filled, WAITS in filled) == (True, True, True)
    assert (ADDS in zeroed, MARKS in zeroed, WAITS in zeroed) == (True, False, False)


def test_a_malformed_tactic_is_a_usage_error():

    result = _build("--tactic", "big")
    assert result.exit_code == 2
    assert "TILE_MxTILE_N:CLUSTER_MxCLUSTER_N:STAGES" in result.output


def test_the_sm100a_build_compiles_the_block_scaled_nvfp4_mma():
    """Blackwell: every kernel of the block-scaled list compiles for sm_100a on the CPU, each
    with tcgen05's block-scaled MMA on the packed operands (kind::mxf4nvf4, 16-value scales)."""
    from stagebot.bot.cli.local.kernels import BLOCK_SCALED_MMA, KERNELS
    from stagebot.kernels.cute.tactics import SM100_TACTICS

    result = _build("--arch", "sm_100a", "--all-tactics")
    assert result.exit_code == 0, result.output
    builds = len(KERNELS) * len(SM100_TACTICS)
    assert f"compiled {builds} of {builds} (kernel, tactic) builds for sm_100a" in result.output
    assert result.output.count(f"{BLOCK_SCALED_MMA} x4") == builds, result.output
    assert "wgmma" not in result.output


def test_an_sm100a_build_without_the_block_scaled_mma_fails(monkeypatch):
    """Negative control: the same kernels with their MMA turned into a plain f16 one (what a
    kernel that dequantised first would issue) fail the sm_100a build."""
    from stagebot.kernels.cute import compile as cute_compile

    real = cute_compile.compile_kernel

    def unscaled(key, *, keep_ptx=False):
        ptx = real(key, keep_ptx=keep_ptx).__ptx__
        planted = re.sub(r"kind::mxf4nvf4\.block_scale\.scale_vec::4X", "kind::f16", ptx)
        assert planted != ptx
        return types.SimpleNamespace(__ptx__=planted)

    monkeypatch.setattr(cute_compile, "compile_kernel", unscaled)
    result = _build("--arch", "sm_100a")
    assert result.exit_code == 1
    assert "PTX has no tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale" in result.output


def test_gpu_checks_broken_fill_takes_the_launchers_arguments():
    """gpu_check's negative control swaps launch._finalize_fill for a broken one: the two must
    take the same arguments (a mismatch errored every control on the GPU, 2026-12-07)."""
    import inspect

    from stagebot.kernels.cute import gpu_check, launch

    broken = inspect.signature(gpu_check._unfilled).parameters
    assert list(broken) == list(inspect.signature(launch._finalize_fill).parameters)
