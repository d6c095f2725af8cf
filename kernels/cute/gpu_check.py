"""One GPU run: the plain CuTe grouped GEMM checked bit for bit, the SwiGLU kernel's tactics
checked against each other, the atomic finalize against the reference, and where the time goes.

    python3 -m stagebot.kernels.cute.gpu_check [--out DIR] [--quick] [--only TEXT ...]

Every check draws fresh random inputs and poisons the output with NaN first: valid tiles must
match the reference backend (fp32-exact decode, "highest" fp32 matmul) and every element of
every non-exiting tile must be written; exiting tiles must stay NaN. The finalize's rows of
tokens without a valid row must be 0 and every element written (an unzeroed row stays NaN under
the adds); its negative control breaks the output's fill and must fail. The same again as
fused_moe runs it, the output zeroed on a side stream and the kernel built for a zeroed output;
its negative control leaves the output unzeroed and must fail. The 256-token RS finalize's
drain build (its epilogue beside the next item's K loop) gets the same checks. The diagnostic builds
(no dequantisation; no WGMMA: wrong results by design) time the two halves of the main loop,
for the fp16-operand tactics too (the weights-in-fp16 one, whose once-per-call pre-pass is also
timed alone, and the RS kernel's). Speed against the peers is
stagebot.kernels.cute.bench_moe's job.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
import traceback
from pathlib import Path

import torch

from stagebot.kernels import layouts, moe_tables, ops
from stagebot.kernels.cute import launch
from stagebot.kernels.cute.bench_moe import LAYERS
from stagebot.kernels.cute.tactics import TACTICS, Tactic, effective

RS256 = next(t for t in TACTICS if t.swap_ab and t.fp16_operand and t.tile_mn[0] == 256)

# bench_moe's T8192 finalize shapes of its first two layers (name, tokens, experts, local
# experts, top_k, n, k), for the finalize's diagnostic builds.
FINALIZE_SHAPES = tuple(
    (
        f"{m.prefix}T8192 GEMM2 finalize",
        8192,
        m.experts,
        m.local_experts,
        m.top_k,
        m.hidden,
        m.inter,
    )
    for m in LAYERS[:2]
)


def make_problem(counts: list[int], n: int, k: int, tile_size: int, spare_tiles: int, seed: int):
    """NVFP4 operands quantised from random data; tables expert-major, then exiting tiles."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    experts = len(counts)
    tiles = [math.ceil(c / tile_size) for c in counts]
    valid_tiles = sum(tiles)
    num_tiles = valid_tiles + spare_tiles
    m = num_tiles * tile_size
    x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.float32)
    w = torch.randn(experts, n, k, device="cuda", generator=g, dtype=torch.float32)
    gs_a = torch.tensor(448.0 * 6 / x.abs().max().item(), device="cuda")
    gs_b = 448.0 * 6 / w.abs().amax(dim=(1, 2))
    a, a_sf = ops.nvfp4_quantize(x, gs_a)
    b, b_sf = ops.nvfp4_quantize(w, gs_b)
    alpha = (1.0 / (gs_a * gs_b)).float()
    group = torch.full((num_tiles,), moe_tables.TABLE_PAD, dtype=torch.int32)
    group[:valid_tiles] = torch.repeat_interleave(torch.arange(experts), torch.tensor(tiles))
    group = group.cuda()
    nne = torch.tensor([valid_tiles], dtype=torch.int32, device="cuda")
    return (
        dict(
            a=a.contiguous(),
            b=b.contiguous(),
            a_sf=a_sf.reshape(-1).contiguous(),
            b_sf=b_sf.reshape(-1).contiguous(),
            alpha=alpha,
            tile_idx_to_group_idx=group,
            num_non_exiting_tiles=nne,
        ),
        valid_tiles * tile_size,
        tiles,
    )


def check(name: str, counts, n, k, tile_size, spare, tactic: Tactic, seed: int) -> dict:
    args, valid_rows, _ = make_problem(counts, n, k, tile_size, spare, seed)
    ref = ops.grouped_gemm(**args, tile_size=tile_size, backend="reference")
    out = torch.full_like(ref, float("nan"))
    launch.grouped_gemm(**args, tile_size=tile_size, tactic=tactic, out=out)
    torch.cuda.synchronize()
    got, want = out[:valid_rows].float(), ref[:valid_rows].float()
    unwritten = int(torch.isnan(got).sum())
    rel = float((got - want).norm() / want.norm().clamp_min(1e-30))
    exiting_written = int((~torch.isnan(out[valid_rows:])).sum())
    close = torch.allclose(got, want, rtol=1.6e-2, atol=1e-5) if unwritten == 0 else False
    ok = unwritten == 0 and exiting_written == 0 and rel < 5e-3 and close
    return _result(name, tactic, ok, rel, unwritten, exiting_written, close)


def _result(name, tactic, ok, rel, unwritten, exiting_written, close, **more) -> dict:
    """A correctness check's line (main prints name, tactic, ok, rel_err and the counts)."""
    return dict(
        name=name,
        tactic=str(tactic),
        ok=ok,
        rel_err=rel,
        unwritten=unwritten,
        exiting_written=exiting_written,
        allclose=close,
        **more,
    )


def check_swiglu_tactics(name: str, counts, n, k, tile_size, seed: int) -> dict:
    """Every tactic's SwiGLU output, with the tile limits, against backend="reference" and
    against the first tactic's, on the valid rows, each of which must be written. The
    sparse_rows tactic quantises decode tiles from shared memory (swiglu_quantize_staged), the
    others in registers: the same fp32 operations, so their bytes must be identical."""
    args, _, tiles = make_problem(counts, n, k, tile_size, 1, seed)
    limits = torch.zeros(args["tile_idx_to_group_idx"].numel(), dtype=torch.int32)
    tile = 0
    for count, expert_tiles in zip(counts, tiles, strict=True):
        for j in range(expert_tiles):
            limits[tile] = tile * tile_size + min(tile_size, count - j * tile_size)
            tile += 1
    limits = limits.cuda()
    valid = moe_tables.valid_rows(limits, tile, tile_size)
    global_sf = torch.tensor([448.0 * 6 / 32], device="cuda")
    call = dict(args, global_sf=global_sf, tile_size=tile_size, tile_idx_to_mn_limit=limits)
    ref_c, ref_sf = ops.grouped_gemm_swiglu(**call, backend="reference")
    sf_cols = n // 32

    def valid_bytes(c, c_sf):
        scales = layouts.unswizzle_sf(c_sf, c.shape[0], sf_cols)
        return c[valid], scales[valid]

    want = valid_bytes(ref_c, ref_sf)

    def run(tactic: Tactic, fill: int):
        c, c_sf = launch.swiglu_outputs(args["a"], args["b"])
        c.fill_(fill)
        c_sf.fill_(fill)
        return valid_bytes(*launch.grouped_gemm_swiglu(**call, tactic=tactic, out=(c, c_sf)))

    outputs, unwritten = {}, {}
    for tactic in TACTICS:
        if n % tactic.tile_mn[1] == 0:
            # Any byte is a valid code pair, so an unwritten byte shows as one that differs
            # between outputs poisoned with 0x00 and with 0xFF.
            zeros, ones = run(tactic, 0x00), run(tactic, 0xFF)
            outputs[str(tactic)] = zeros
            unwritten[str(tactic)] = sum(
                int((z != o).sum()) for z, o in zip(zeros, ones, strict=True)
            )
    first = next(iter(outputs.values()))
    same = {
        t: all(torch.equal(g, f) for g, f in zip(got, first, strict=True))
        for t, got in outputs.items()
    }
    match = {
        t: min(float((g == w).double().mean()) for g, w in zip(got, want, strict=True))
        for t, got in outputs.items()
    }
    ok = all(same.values()) and min(match.values()) >= 0.95 and not any(unwritten.values())
    return dict(
        name=name, ok=ok, identical_to_first=same, reference_match=match, unwritten=unwritten
    )


def finalize_problem(tokens, experts, local_experts, top_k, n, k, seed: int) -> dict:
    """A finalize call's arguments (tiles of 128) from bench_moe's balanced routing: tokens
    with no local row, with one and with several; the permuted buffer is sized for the worst
    case, so it ends in exiting tiles."""
    from stagebot.kernels.cute.bench_moe import Shape, build_problem

    shape = Shape("gpu_check", "finalize", tokens, experts, local_experts, top_k, n, k)
    return build_problem(shape, seed).op_args["grouped_gemm_finalize"]


def check_finalize(
    name: str, call: dict, tactic: Tactic, variant: str = "", *, aside: bool = False
) -> dict:
    """The atomic finalize with ``tactic`` into a NaN-poisoned output (an element left unwritten,
    or a routed token's row not zeroed before its adds, stays NaN) against backend="reference":
    the tokens with no valid row must be exactly 0, the others within bench_moe's bound.
    ``aside``: as fused_moe runs it, the output zeroed on a side stream (joined), then the
    kernel built for a zeroed output, which only adds. ``variant``: a build that must give
    the kernel's result (DRAIN), checked the same way."""
    from stagebot.kernels import moe_pipeline

    ref = ops.grouped_gemm_finalize(**call, backend="reference")
    out = torch.full_like(ref, float("nan"))
    args = {key: value for key, value in call.items() if key != "deterministic"}
    if aside:
        moe_pipeline.zero_aside(out)()
    launch.grouped_gemm_finalize(**args, tactic=tactic, out=out, out_zeroed=aside, _variant=variant)
    torch.cuda.synchronize()
    unwritten = int(torch.isnan(out).sum())
    routed = ref.ne(0).any(dim=1)
    unrouted_nonzero = int(out[~routed].ne(0).sum()) if unwritten == 0 else -1
    got, want = out[routed].float(), ref[routed].float()
    atol = 1e-2 * float(want.abs().max())
    close = float(torch.isclose(got, want, rtol=1.6e-2, atol=atol).float().mean())
    rel = float((got - want).norm() / want.norm().clamp_min(1e-30))
    ok = unwritten == 0 and unrouted_nonzero == 0 and close > 0.99 and rel < 1e-2
    # exiting_written here: nonzero elements in the rows of tokens without a valid row
    name = f"{name} {variant}" if variant else name
    return _result(
        name, tactic, ok, rel, unwritten, unrouted_nonzero, close, routed=int(routed.sum())
    )


def _unfilled(tactic: Tactic, out: torch.Tensor, zeroed: bool) -> dict[str, torch.Tensor]:
    """launch._finalize_fill broken on purpose: nothing zeroes the output (a filling kernel's
    workspace marks every token as zeroed already)."""
    from stagebot.kernels.cute.compile import kernel_class
    from stagebot.kernels.cute.finalize_fill import HEADER, workspace_words

    if zeroed or not kernel_class(tactic).fills_finalize_output(tactic):
        return {}
    work = torch.ones(workspace_words(out.shape[0]), dtype=torch.int32, device=out.device)
    work[:HEADER] = 0
    return {"work": work}


def finalize_control(name: str, call: dict, tactic: Tactic, variant: str = "") -> dict:
    """check_finalize's negative control: with the fill broken it must fail."""
    from unittest import mock

    with mock.patch.object(launch, "_finalize_fill", _unfilled):
        r = check_finalize(name, call, tactic, variant=variant)
    return dict(r, name=f"{r['name']} (control: fill broken)", ok=not r["ok"])


def check_finalize_aside(name: str, call: dict, tactic: Tactic, variant: str = "") -> dict:
    r = check_finalize(name, call, tactic, aside=True, variant=variant)
    return dict(r, name=f"{r['name']} zeroed aside")


def finalize_aside_control(name: str, call: dict, tactic: Tactic, variant: str = "") -> dict:
    """check_finalize_aside's negative control: nothing zeroes the output aside (the join
    comes back, the NaN stays); the kernel built for a zeroed output must then fail the check."""
    from unittest import mock

    from stagebot.kernels import moe_pipeline

    with mock.patch.object(moe_pipeline, "zero_aside", lambda out: lambda: None):
        r = check_finalize(name, call, tactic, aside=True, variant=variant)
    return dict(r, name=f"{r['name']} zeroed aside (control: not zeroed)", ok=not r["ok"])


def bench_variant(name: str, counts, n, k, tile_size, tactic: Tactic, variant: str) -> dict:
    """Timing of the kernel (variant "") or of a diagnostic build (its output is wrong by
    design): where the time goes. Decode tactics get the tiles' row limits, so they run the
    valid rows only, as the MoE ops call them."""
    from stagebot.kernels.cute.timing import time_us

    args, _, tiles = make_problem(counts, n, k, tile_size, 0, 7)
    out = torch.empty(args["a"].shape[0], n, dtype=torch.bfloat16, device="cuda")
    limit = None
    if tactic.swap_ab:  # each tile's first row plus its valid rows
        firsts = [sum(tiles[:e]) for e in range(len(tiles))]
        rows = [
            tile_size * (first + t) + min(tile_size, count - tile_size * t)
            for first, count, n_tiles in zip(firsts, counts, tiles, strict=True)
            for t in range(n_tiles)
        ]
        limit = torch.tensor(rows, dtype=torch.int32, device="cuda")

    def run_cute():
        launch.grouped_gemm(
            **args, tile_size=tile_size, tactic=tactic, out=out, tile_idx_to_mn_limit=limit,
            _variant=variant,
        )  # fmt: skip

    return dict(name=name, tactic=str(tactic), variant=variant, us=time_us(run_cute)["us"])


ZEROED = "zeroed aside"  # bench_finalize_variant's kernel for an output zeroed beforehand
# The 256-token RS finalize's build with its epilogue beside the next item's K loop: the
# consumers hand each item over in bf16, warps 9-11 add it (rs_gemm.py); the kernel's result.
DRAIN = "drain"
# bench_finalize_variant's builds of the 256-token RS finalize: (variant, zeroed output)
FINALIZE_BUILDS = (
    ("", False), ("", True), ("no_unrouted", False), ("no_adds", False), (DRAIN, False),
    (DRAIN, True), ("drain_no_adds", False),
)  # fmt: skip


def bench_finalize_variant(
    name: str, call: dict, tactic: Tactic, build: str, zeroed: bool = False
) -> dict:
    """Timing of the finalize kernel (build ""), with ``zeroed`` the kernel for an output
    zeroed before it (fused_moe's, no fill, no wait; the zeroing itself not timed), or of
    another build of the 256-token RS kernel: DRAIN (the kernel's result), or a diagnostic one,
    "no_unrouted" (the routed tokens' rows zeroed, the others not), "no_adds" (no atomics),
    "drain_no_adds" (the drain's hand-overs, no atomics), whose outputs are wrong by design.
    Where the finalize's time over the plain GEMM goes."""
    from stagebot.kernels.cute.timing import time_us

    args = {key: value for key, value in call.items() if key != "deterministic"}
    out = launch.finalize_outputs(args["a"], args["b"], args["num_tokens"])

    def run_cute():
        launch.grouped_gemm_finalize(
            **args, tactic=tactic, out=out, out_zeroed=zeroed, _variant=build
        )

    variant = ", ".join(filter(None, (build, ZEROED if zeroed else "")))
    return dict(name=name, tactic=str(tactic), variant=variant, us=time_us(run_cute)["us"])


def bench_operand_prepass(name: str, counts, n, k, tile_size, operand: str) -> dict:
    """Timing of triton_elementwise.nvfp4_operand alone on operand "a" or "b": the pre-pass
    an fp16_operand tactic runs per call (its kernel timing above includes it)."""
    from stagebot.kernels.cute.timing import time_us
    from stagebot.kernels.triton_elementwise import nvfp4_operand

    args, _, _ = make_problem(counts, n, k, tile_size, 0, 7)
    if operand == "a":
        packed, sf = args["a"], args["a_sf"]
    else:
        packed, sf = args["b"].reshape(len(counts) * n, k // 2), args["b_sf"]
    us = time_us(lambda: nvfp4_operand(packed, sf))["us"]
    return dict(name=name, tactic="nvfp4_operand pre-pass", variant=operand, us=us)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=".")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--only", action="append", default=[], metavar="TEXT",
        help="the checks whose case name holds TEXT (repeatable: any TEXT); implies --quick",
    )  # fmt: skip
    opts = parser.parse_args(argv)

    def chosen(name: str) -> bool:
        return not opts.only or any(text in name for text in opts.only)

    out_dir = Path(opts.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    results: dict[str, list] = {"checks": [], "swiglu": [], "variants": [], "errors": []}

    def guarded(fn, *a):
        try:
            t0 = time.time()
            r = fn(*a)
            r["wall_s"] = round(time.time() - t0, 2)
            print(json.dumps(r), flush=True)
            return r
        except Exception as error:  # keep going: one failure must not hide the others
            results["errors"].append(f"{a[0]}: {error!r}")
            traceback.print_exc()
            return None

    cases = [
        ("small_t128", [5, 130, 0, 257], 256, 256, 128, 2),
        ("t256_mixed", [300, 1, 511], 384 * 2, 512, 256, 1),
        ("k7168_decode", [4] * 8, 512, 7168, 128, 3),
    ]
    # The plain op without tile limits: each sparse_rows tactic is its dense twin here.
    dense_tactics = dict.fromkeys(effective(t, reads_limit=False) for t in TACTICS)
    for i, tactic in enumerate(dense_tactics):
        for name, counts, n, k, tile, spare in cases:
            if n % tactic.tile_mn[1] or not chosen(name):
                continue
            r = guarded(check, name, counts, n, k, tile, spare, tactic, 1000 * i + len(name))
            if r:
                results["checks"].append(r)
    finalize_cases = [
        # (tokens, experts, local experts, top_k, n, k): 2 local rows per routed token, most
        # tokens unrouted; then every token routed 8 times (rows zeroed once, 8 adds each).
        ("finalize_ep", 700, 64, 8, 8, 512, 256),
        ("finalize_all_local", 300, 16, 16, 8, 256, 512),
    ]
    finalize_checks = (
        check_finalize, finalize_control, check_finalize_aside, finalize_aside_control,
    )  # fmt: skip
    finalize_calls = {
        name: finalize_problem(*shape, seed=500 + i)
        for i, (name, *shape) in enumerate(finalize_cases)
        if chosen(name)
    }
    # every tactic's kernel, then the drain build (last: its failure mode would be a hang)
    for variant, tactics in (("", TACTICS), (DRAIN, [RS256])):
        for name, call in finalize_calls.items():
            operands = [call[key] for key in ("a", "b", "a_sf", "b_sf")]
            for tactic in tactics:
                if launch.problem_support(tactic, *operands, 128, "grouped_gemm_finalize")[0]:
                    for fn in finalize_checks:
                        r = guarded(fn, name, call, tactic, variant)
                        if r:
                            results["checks"].append(r)
    swiglu_cases = [
        ("swiglu_decode", [4, 1, 0, 31, 32, 33, 64, 2], 512, 1024, 128),
        ("swiglu_t256_mixed", [300, 1, 511, 70], 512, 512, 256),
        # Tiles of 128 in pairs (256-token RS items): joined pairs with a partial second
        # tile, a pair split between experts, and a last tile without a partner.
        ("swiglu_t128_pairs", [130, 257, 1, 256, 3], 512, 512, 128),
    ]
    for i, (name, counts, n, k, tile) in enumerate(swiglu_cases):
        if not chosen(name):
            continue
        r = guarded(check_swiglu_tactics, name, counts, n, k, tile, 77 + i)
        if r:
            results["swiglu"].append(r)
    shapes = [
        ("8x8192_N4096_K4096", [8192] * 8, 4096, 4096),
        ("t8192_gemm1_8x256_N4096_K7168", [256] * 8, 4096, 7168),
        ("t8192_gemm2_8x256_N7168_K2048", [256] * 8, 7168, 2048),
        ("dec16_gemm1_N4096_K7168", [4] * 8, 4096, 7168),
    ]
    decode = next(t for t in TACTICS if t.swap_ab and not t.fp16_operand)
    b16 = next(t for t in TACTICS if t.fp16_operand == "b")
    rs_tactics = [t for t in TACTICS if t.swap_ab and t.fp16_operand]
    builds = [(TACTICS[0], v) for v in ("", "no_dequant", "no_mma", "a_only", "b_only")]
    builds += [(b16, v) for v in ("", "no_dequant", "no_mma")]
    builds += [(rs, v) for rs in rs_tactics for v in ("", "no_dequant")]

    builds += [(decode, v) for v in ("", "no_mma", "no_tokens")]
    if not (opts.quick or opts.only):
        for name, counts, n, k in shapes:
            for tactic, variant in builds:
                if tactic == decode and max(counts) > tactic.tile_mn[0]:
                    continue  # the decode diagnostics are for decode shapes
                if tactic.fp16_operand and max(counts) <= 128:
                    continue  # the once-per-call pre-pass is for large M
                r = guarded(bench_variant, name, counts, n, k, 128, tactic, variant)
                if r:
                    results["variants"].append(r)
        name, counts, n, k = shapes[0]
        for operand in "ab":
            r = guarded(bench_operand_prepass, name, counts, n, k, 128, operand)
            if r:
                results["variants"].append(r)
        calls = {name: finalize_problem(*shape, seed=9) for name, *shape in FINALIZE_SHAPES}
        for (build, zeroed), (name, call) in itertools.product(FINALIZE_BUILDS, calls.items()):
            r = guarded(bench_finalize_variant, name, call, RS256, build, zeroed)
            if r:
                results["variants"].append(r)
    (out_dir / "gpu_check.json").write_text(json.dumps(results, indent=1))
    print("\n== correctness (fresh random inputs, NaN-poisoned outputs) ==")
    for r in results["checks"]:
        print(
            f"{r['name']:<16} {r['tactic']:<30} ok={r['ok']} rel={r['rel_err']:.2e} "
            f"unwritten={r['unwritten']} exiting_written={r['exiting_written']}"
        )
    print("\n== SwiGLU: each tactic vs the first (bytes identical) and vs reference ==")
    for r in results["swiglu"]:
        for tactic, same in r["identical_to_first"].items():
            match = r["reference_match"][tactic]
            print(
                f"{r['name']:<18} {tactic:<38} identical={same} reference_match={match:.4f} "
                f"unwritten={r['unwritten'][tactic]}"
            )
    print("\n== the kernels, the drain build and the diagnostic builds (median us) ==")
    for r in results["variants"]:
        variant = r["variant"] or "(kernel)"
        print(f"{r['name']:<26}{r['tactic']:<30}{variant:<22}{r['us']:>10.1f}")
    for e in results["errors"]:
        print("ERROR", e[:300])
    checks = results["checks"] + results["swiglu"]
    failed = results["errors"] or not all(r["ok"] for r in checks)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
