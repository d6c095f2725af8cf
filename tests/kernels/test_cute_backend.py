"""The cute backend's registration and refusal reasons (CPU: it must never be chosen)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import extras

torch = extras.require("torch")


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
    extras.require("cutlass")
    from stagebot.kernels.cute.compile import kernel_class
    from stagebot.kernels.cute.grouped_gemm import Nvfp4GroupedGemmSm90 as K
    from stagebot.kernels.cute.tactics import TACTICS, Tactic

    for tactic in TACTICS:
        assert kernel_class(tactic).can_implement(tactic, 4096, 7168, 128) == (True, "")
    assert not K.is_valid_cluster(Tactic((128, 128), (2, 1), 4))
    assert not K.is_valid_smem(Tactic((128, 256), (1, 1), 12))
    ok, why = K.can_implement(Tactic((128, 256), (1, 1), 4), 384, 7168, 128)
    assert not ok and why.endswith("n=384 must be a multiple of the tile's N (256)"), why
    ok, why = K.can_implement(Tactic((128, 128), (1, 1), 4), 4096, 100, 128)
    assert not ok and why.endswith("K=100 must be a multiple of 64"), why
    ok, why = K.can_implement(
        Tactic((128, 128), (1, 1), 4, wg_split="n"), 4096, 7168, 128, "swiglu"
    )
    assert not ok and "needs the warpgroups to split M" in why, why
    assert K.can_implement(Tactic((128, 128), (1, 1), 4, wg_split="n"), 4096, 7168, 128)[0]
    ok, why = K.can_implement(Tactic((128, 128), (1, 1), 4, sparse_rows=True), 4096, 7168, 128)
    assert not ok and "sparse_rows needs a 128 x 256 tile" in why, why
    ok, why = K.can_implement(Tactic((128, 128), (1, 1), 1), 4096, 7168, 128)
    assert not ok and "stages is 1" in why, why


def test_the_register_budgets_fit_what_the_cta_is_launched_with():
    """setmaxnreg only moves registers within the CTA's launch allocation (ptxas caps it by
    the block size): budgets above it hang at the increase, as four MMA warpgroups with the
    producer at 40 registers did on the H200."""
    extras.require("cutlass")
    from stagebot.kernels.cute.grouped_gemm import Nvfp4GroupedGemmSm90 as K
    from stagebot.kernels.cute.tactics import TACTICS

    kernel = K(TACTICS[0])
    assert (kernel.threads_per_cta, kernel.launch_registers()) == (384, 168)  # ptxas: 168
    assert kernel.registers_fit()
    kernel.mma_regs += 8
    assert not kernel.registers_fit()
    four = K(TACTICS[0])  # 4 MMA warpgroups: 640 threads launch with 96 registers each
    four.num_mma_threads, four.threads_per_cta, four.mma_regs = 512, 640, 112
    assert four.launch_registers() == 96 and not four.registers_fit()
    four.load_regs = 24
    assert four.registers_fit()


def test_decode_tactics_run_on_the_decode_kernel_only():
    extras.require("cutlass")
    from stagebot.kernels.cute.compile import kernel_class
    from stagebot.kernels.cute.decode_gemm import Nvfp4DecodeGemmSm90 as D
    from stagebot.kernels.cute.grouped_gemm import Nvfp4GroupedGemmSm90 as K
    from stagebot.kernels.cute.tactics import TACTICS, Tactic

    decode = [t for t in TACTICS if t.swap_ab and not t.fp16_operand]
    assert decode and all(kernel_class(t) is D for t in decode)
    assert all(kernel_class(t) is K for t in TACTICS if not t.swap_ab)
    ok, why = K.can_implement(decode[0], 4096, 7168, 128)
    assert not ok and "run on the decode kernel" in why, why
    ok, why = D.can_implement(TACTICS[0], 4096, 7168, 128)
    assert not ok and "runs swap_ab tactics without an fp16 operand" in why, why
    ok, why = D.can_implement(decode[0], 4096, 7168 + 64, 128)
    assert not ok and why.endswith("K=7232 must be a multiple of 256"), why
    ok, why = D.can_implement(decode[0], 4096 + 64, 7168, 128)
    assert not ok and why.endswith("n=4160 must be a multiple of 128"), why
    ok, why = D.can_implement(Tactic((16, 128), (1, 1), 6, swap_ab=True), 4096, 7168, 128)
    assert not ok and "must be (8 | 32) tokens x 128 weight rows" in why, why
    ok, why = D.can_implement(Tactic((32, 128), (1, 1), 12, swap_ab=True), 4096, 7168, 128)
    assert not ok and "sm_90 allows" in why, why
    assert all(D.can_implement(t, 4096, 7168, 128)[0] for t in decode)
    ok, why = D.can_implement(
        Tactic((8, 128), (1, 1), 5, swap_ab=True, ctas_per_sm=2), 4096, 7168, 128
    )
    assert not ok and "2 CTAs per SM of 120960 B" in why and "do not fit" in why, why
    ok, why = K.can_implement(Tactic((128, 256), (1, 1), 4, ctas_per_sm=2), 4096, 7168, 128)
    assert not ok and "one CTA per SM" in why, why


def test_the_grid_is_ctas_per_sm_times_the_sms():
    """A two-CTA tactic launches two persistent CTAs per SM, never more than the work items."""
    from stagebot.kernels.cute.launch import grid_ctas
    from stagebot.kernels.cute.tactics import TACTICS, Tactic

    two = Tactic((8, 128), (1, 1), 4, swap_ab=True, ctas_per_sm=2)
    assert two in TACTICS
    assert grid_ctas(two, 8 * 128, 7168, 128, 132) == 264  # 448 items: 8 tiles x 56 blocks
    assert grid_ctas(replace(two, ctas_per_sm=1), 8 * 128, 7168, 128, 132) == 132
    assert grid_ctas(two, 2 * 128, 256, 128, 132) == 4  # two tiles x two weight blocks
    assert grid_ctas(TACTICS[0], 256, 512, 128, 132) == 4  # 128 x 256 CTA tiles


def test_compiled_kernels_are_cached_by_key(monkeypatch):
    from stagebot.kernels.cute import compile as cc
    from stagebot.kernels.cute.tactics import DEFAULT_TACTIC

    key = cc.CompileKey(
        "grouped_gemm", DEFAULT_TACTIC, cc.DTYPES["grouped_gemm"], 256, 256, 2, 128, "sm_90a"
    )
    sentinel = object()
    monkeypatch.setitem(cc._cache, key, sentinel)
    assert cc.compile_kernel(key) is sentinel


def _gemm_args(n: int = 256, k: int = 128, experts: int = 2, tile: int = 128) -> dict:
    return dict(
        a=torch.zeros(tile, k // 2, dtype=torch.uint8),
        b=torch.zeros(experts, n, k // 2, dtype=torch.uint8),
        a_sf=torch.zeros(tile * k // 16, dtype=torch.uint8),
        b_sf=torch.zeros(experts * n * k // 16, dtype=torch.uint8),
        tile_size=tile,
    )


@pytest.fixture
def on_an_h200(monkeypatch):
    """The device check passes (CPU tensors stand in: only shapes and strides are read)."""
    extras.require("cutlass")
    from stagebot.kernels.cute import backend as cute_backend

    monkeypatch.setattr(cute_backend, "_device_reason", lambda a: "")
    return cute_backend


def test_a_pinned_tactic_that_does_not_fit_is_refused_with_its_reason(on_an_h200):
    from stagebot.kernels.cute import autotune
    from stagebot.kernels.cute.tactics import TACTICS

    args = _gemm_args(n=384)
    assert on_an_h200.can_implement("grouped_gemm", **args) == (True, "")  # a 128-wide tactic
    with autotune.fixed_tactic(TACTICS[0]):
        ok, why = on_an_h200.can_implement("grouped_gemm", **args)
    assert not ok and why.startswith(f"pinned tactic {TACTICS[0]}: n=384 must be"), why


def test_when_no_tactic_fits_every_refusal_is_given(on_an_h200):
    from stagebot.kernels.cute.tactics import TACTICS

    ok, why = on_an_h200.can_implement("grouped_gemm", **_gemm_args(n=192))
    assert not ok and why.count("n=192 must be a multiple") == len(TACTICS), why


def test_operands_tma_cannot_read_are_refused(on_an_h200):
    args = _gemm_args()
    args["b"] = torch.zeros(2, 128, 256, dtype=torch.uint8)[:, :, :64]  # rows 256 bytes apart
    ok, why = on_an_h200.can_implement("grouped_gemm", **args)
    assert not ok and "b must be contiguous and 16-byte aligned for TMA" in why, why


def _moe_args(hidden: int = 256, inter: int = 256, **flags) -> dict:
    experts = 2
    return dict(
        x=torch.zeros(4, hidden),
        w1=torch.zeros(experts, 2 * inter, hidden // 2, dtype=torch.uint8),
        w1_sf=torch.zeros(experts * 2 * inter * hidden // 16, dtype=torch.uint8),
        w2=torch.zeros(experts, hidden, inter // 2, dtype=torch.uint8),
        w2_sf=torch.zeros(experts * hidden * inter // 16, dtype=torch.uint8),
        tile_size=128,
        **{"disable_finalize_fusion": False, "deterministic": False, **flags},
    )


@pytest.mark.parametrize(
    ("flags", "second_gemm"),
    [
        ({}, "grouped_gemm_finalize"),
        ({"deterministic": True}, "grouped_gemm_f32_rows"),
        ({"disable_finalize_fusion": True}, "grouped_gemm"),
    ],
)
def test_fused_moe_checks_the_second_gemm_it_will_launch(on_an_h200, flags, second_gemm):
    assert on_an_h200.can_implement("fused_moe", **_moe_args(**flags)) == (True, "")
    ok, why = on_an_h200.can_implement("fused_moe", **_moe_args(hidden=192, **flags))
    assert not ok and f"{second_gemm}: tactic" in why and "n=192 must be" in why, why


def test_fused_moe_refuses_weights_tma_cannot_read(on_an_h200):
    args = _moe_args()
    args["w2"] = args["w2"].transpose(1, 2).contiguous().transpose(1, 2)
    ok, why = on_an_h200.can_implement("fused_moe", **args)
    assert not ok and "w2 must be contiguous" in why, why


def test_the_deterministic_finalize_needs_triton(on_an_h200, monkeypatch):
    real = on_an_h200.importlib.util.find_spec
    monkeypatch.setattr(
        on_an_h200.importlib.util,
        "find_spec",
        lambda name: None if name == "triton" else real(name),
    )
    args = dict(_gemm_args(), deterministic=True)
    ok, why = on_an_h200.can_implement("grouped_gemm_finalize", **args)
    assert not ok and "triton is not importable" in why and "deterministic=False" in why, why
    assert on_an_h200.can_implement("grouped_gemm_finalize", **dict(args, deterministic=False))[0]


def test_an_fp16_operand_is_loaded_as_fp16_and_holds_a_ring_stage():
    """fp16_operand tactics: the operand's pointer is fp16, its ring stage holds its fp16 tile
    (no packed bytes, no scales) and it needs no dequantised buffers; the decode kernel and
    sparse_rows refuse it."""
    extras.require("cutlass")
    import cutlass

    from stagebot.kernels.cute.compile import pointer_dtypes
    from stagebot.kernels.cute.decode_gemm import Nvfp4DecodeGemmSm90 as D
    from stagebot.kernels.cute.grouped_gemm import Nvfp4GroupedGemmSm90 as K
    from stagebot.kernels.cute.tactics import TACTICS, Tactic

    plain = Tactic((128, 256), (1, 1), 4)
    a16, b16 = (Tactic((128, 256), (1, 1), 4, fp16_operand=x) for x in "ab")
    assert b16 in TACTICS
    u8, f16 = cutlass.Uint8, cutlass.Float16
    assert pointer_dtypes("grouped_gemm", plain)[:2] == (u8, u8)
    assert pointer_dtypes("grouped_gemm", a16)[:2] == (f16, u8)
    assert pointer_dtypes("grouped_gemm_swiglu", b16)[:2] == (u8, f16)
    # Per stage: A 128 x 64 fp16 instead of 128 x 32 bytes + 512 B of scales; three fewer
    # dequantised 128 x 64 fp16 buffers.
    assert K.smem_bytes(a16) - K.smem_bytes(plain) == 4 * (16384 - 4608) - 3 * 16384
    assert K.smem_bytes(b16) - K.smem_bytes(plain) == 4 * (32768 - 9216) - 3 * 32768
    ok, why = K.can_implement(Tactic((128, 256), (1, 1), 4, fp16_operand="c"), 4096, 7168, 128)
    assert not ok and "fp16_operand is 'c'" in why, why
    sparse = Tactic((128, 256), (1, 1), 4, sparse_rows=True, fp16_operand="a")
    assert "not with sparse_rows" in K.can_implement(sparse, 4096, 7168, 128)[1]
    decode = Tactic((8, 128), (1, 1), 4, swap_ab=True, fp16_operand="a")
    assert "without an fp16 operand" in D.can_implement(decode, 4096, 7168, 128)[1]


def test_swap_ab_tactics_with_the_tokens_in_fp16_run_on_the_rs_kernel_only():
    """The RS kernel: weights from registers, 128 tokens in fp16 per work item; the other
    kernels refuse its tactic and it refuses theirs, each naming the rule."""
    cutlass = extras.require("cutlass")
    from stagebot.kernels.cute.compile import kernel_class, pointer_dtypes
    from stagebot.kernels.cute.grouped_gemm import Nvfp4GroupedGemmSm90 as K
    from stagebot.kernels.cute.rs_gemm import Nvfp4RsGemmSm90 as R
    from stagebot.kernels.cute.tactics import TACTICS

    rs = [t for t in TACTICS if t.swap_ab and t.fp16_operand]
    assert rs and all(kernel_class(t) is R for t in rs)
    assert all(R.can_implement(t, 4096, 7168, 128) == (True, "") for t in rs)
    assert pointer_dtypes("grouped_gemm", rs[0])[:2] == (cutlass.Float16, cutlass.Uint8)
    why = K.can_implement(rs[0], 4096, 7168, 128)[1]
    assert "or with the tokens in fp16 on the RS kernel" in why, why
    refusals = {
        TACTICS[0]: "runs swap_ab tactics with the tokens in fp16 (fp16_operand 'a')",
        replace(rs[0], fp16_operand="b"): "fp16_operand 'a'",
        replace(rs[0], tile_mn=(64, 128)): "tile 64x128 must be 128 | 256 tokens x 128 weight",
        replace(rs[0], stages=8): "needs 237568 B of shared memory; sm_90 allows 232448 B",
        replace(rs[0], ctas_per_sm=2): "are other kernels' knobs",
    }
    for tactic, why in refusals.items():
        ok, got = R.can_implement(tactic, 4096, 7168, 128)
        assert not ok and why in got, (tactic, got)
    ok, why = R.can_implement(rs[0], 4096, 7168 + 64, 128)
    assert not ok and why.endswith("K=7232 must be a multiple of 128 (K steps of 64 go in pairs)")
    ok, why = R.can_implement(rs[0], 4096, 7168, 64)
    assert not ok and "tile_size=64 must be a multiple of 128 and of 128 tokens" in why, why


def test_the_256_token_rs_tactic_takes_table_tiles_in_pairs():
    """256 tokens per work item: over tiles of 128 an item is two tiles (the grid counts pair
    items), over tiles of 256 one; tiles of 384 split no item evenly and are refused. Its
    ring fits only 4 stages beside the 128-token epilogue stage."""
    pytest.importorskip("cutlass")
    from stagebot.kernels.cute.launch import grid_ctas
    from stagebot.kernels.cute.rs_gemm import Nvfp4RsGemmSm90 as R
    from stagebot.kernels.cute.tactics import TACTICS

    wide = next(t for t in TACTICS if t.swap_ab and t.fp16_operand and t.tile_mn[0] == 256)
    for tile_size in (128, 256, 512):
        assert R.can_implement(wide, 4096, 7168, tile_size) == (True, ""), tile_size
    ok, why = R.can_implement(wide, 4096, 7168, 384)
    assert not ok and "tile_size=384 must be a multiple of 128 and of 256 tokens, or half" in why
    ok, why = R.can_implement(replace(wide, stages=5), 4096, 7168, 128)
    assert not ok and "B of shared memory; sm_90 allows 232448 B" in why, why
    narrow = replace(wide, tile_mn=(128, 128))
    # 16 tiles of 128 x 56 weight-row blocks: 896 items of one tile, 448 of two.
    assert grid_ctas(narrow, 16 * 128, 7168, 128, 1000) == 896
    assert grid_ctas(wide, 16 * 128, 7168, 128, 1000) == 448
    assert grid_ctas(wide, 15 * 128, 7168, 128, 1000) == 448  # the last tile has no partner
    assert grid_ctas(wide, 8 * 256, 7168, 256, 1000) == 448


def test_fp16_operand_tactics_need_triton(on_an_h200, monkeypatch):
    """Their operand is made by triton_elementwise.nvfp4_operand: without Triton only the
    other tactics fit, and a pinned fp16 tactic is refused with the reason."""
    from stagebot.kernels.cute import autotune
    from stagebot.kernels.cute.tactics import TACTICS

    real = on_an_h200.importlib.util.find_spec
    monkeypatch.setattr(
        on_an_h200.importlib.util,
        "find_spec",
        lambda name: None if name == "triton" else real(name),
    )
    fits = on_an_h200._operand_fit(_gemm_args())
    tactics, _ = on_an_h200._fitting("grouped_gemm", TACTICS, fits)
    assert tactics and not any(t.fp16_operand for t in tactics), tactics
    b16 = next(t for t in TACTICS if t.fp16_operand == "b")
    with autotune.fixed_tactic(b16):
        tactics, why = on_an_h200._fitting("grouped_gemm", TACTICS, fits)
    assert not tactics and "triton is not importable" in why and str(b16) in why, why


def test_the_sm100_backend_is_never_auto_and_says_it_never_ran():
    """The Blackwell kernels are compiled, not run on hardware: "auto" never reaches their
    backend (below the reference), naming it is refused with that sentence on any machine
    (what a B200 stage forced onto it reports for each case), and its tactics stay out of the
    Hopper list, the autotuner's candidates."""
    import subprocess
    import sys

    # A fresh process's registry has it (the suite's --moe-backend takes registered names).
    names = subprocess.run(
        [sys.executable, "-c", "from stagebot.kernels import backends as b; "
         "print(*sorted(x.name for x in b.registered()))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert "cute-sm100" in names, names
    from stagebot.kernels import backends
    from stagebot.kernels.cute import backend_sm100
    from stagebot.kernels.cute.tactics import SM100_TACTICS, TACTICS
    from stagebot.kernels.errors import BackendUnavailableError

    by_name = {b.name: b for b in backends.registered()}
    assert by_name["cute-sm100"].priority < by_name["reference"].priority
    assert SM100_TACTICS and not any(t.blockscaled for t in TACTICS)
    assert all(t.blockscaled for t in SM100_TACTICS)
    assert backend_sm100.GPU_VERIFIED is False
    for op in backends.DISPATCHED_OPS:
        with pytest.raises(
            BackendUnavailableError, match="compiled for sm_100a, not run on hardware"
        ):
            backends.resolve(op, "cute-sm100", {"a": None, "x": None})
    assert backends.resolve("grouped_gemm", "auto", {"a": None}).name != "cute-sm100"


def test_the_sm100_kernel_takes_blockscaled_tactics_only():
    pytest.importorskip("cutlass")
    from stagebot.kernels.cute.compile import kernel_class
    from stagebot.kernels.cute.sm100_gemm import Nvfp4BlockScaledGemmSm100 as B
    from stagebot.kernels.cute.tactics import SM100_TACTICS, TACTICS

    sm100 = SM100_TACTICS[0]
    assert kernel_class(sm100) is B and str(sm100).endswith("_sm100")
    assert B.can_implement(sm100, 4096, 7168, 128) == (True, "")
    assert "blockscaled tactics only" in B.can_implement(TACTICS[0], 4096, 7168, 128)[1]
    ok, why = B.can_implement(sm100, 4096, 7168 + 64, 128)
    assert not ok and "K=7232 must be a multiple of 256" in why, why
    ok, why = B.can_implement(replace(sm100, tile_mn=(128, 256)), 4096, 7168, 128)
    assert not ok and "must be 128 tokens x 128 weight rows" in why, why
