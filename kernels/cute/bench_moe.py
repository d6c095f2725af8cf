"""Benchmark of the CuTe NVFP4 MoE GEMMs against torch's grouped GEMMs, with the issue's floors.

    python3 -m stagebot.kernels.cute.bench_moe [--out DIR] [--quick] [--only TEXT ...]
    python3 -m stagebot.kernels.cute.bench_moe --layer [--out DIR] [--quick] [--only TEXT ...]
    python3 -m stagebot.kernels.cute.bench_moe --summary DIR/bench_moe.json

``--layer`` times the whole MoE layer instead (stagebot.kernels.cute.bench_layer: its own
shapes, peers and checks, DIR/bench_layer.json); ``--summary`` reprints either file's summary.

Shapes: S1, a plain grouped GEMM of 8 experts x 8192 rows, N = K = 4096; then three MoE layers
(``LAYERS``) at 16, 128 and 8192 tokens, GEMM1 (N = 2 * intermediate, K = hidden, SwiGLU) and
GEMM2 (N = hidden, K = intermediate, finalize), tables from ops.moe_sort over a balanced routing
(max(1, tokens * top_k / experts) rows per local expert, tiles of 128): 256 experts over EP 32
(8 local), top-8, hidden 7168, intermediate 2048 (unprefixed names); Qwen3-30B-A3B, 128
experts all local, top-8, hidden 2048, intermediate 768; a Mixtral-8x7B-like layer, 8 experts
all local, top-2, hidden 4096, intermediate 14336. ``--quick`` runs the first layer's 16-token
GEMMs only; ``--only TEXT`` (repeatable) keeps the shapes whose name holds every TEXT given, e.g.
``--only Mixtral --only T8192``.

Implementations, timed in the same run (min of do_bench's median and CUDA-graph replay):
- ours: the cute backend's implementation of the op, called without the op API's validation
  (which syncs the host), its tactic picked by the autotuner (autotune.tuning() is on: the first
  call of each kernel and row bucket measures every fitting tactic; the picks are printed);
  GEMM1 fused and unfused (plain GEMM + Triton swiglu_quantize over the
  non-exiting tiles' rows), GEMM2 fused with atomics, fused deterministic, and unfused (plain
  GEMM + Triton unpermute), and the unfused composition's GEMM step alone (unchecked; the
  rest of "unfused" is its Triton step). Each "ours" is checked once against
  backend="reference" (ok / FAIL):
  SwiGLU codes and scales of the valid rows >= 95% equal; other outputs isclose (rtol 1.6e-2,
  atol 1% of the largest value) on > 99% of the valid elements and relative error < 1%.
- peers: torch._grouped_mm in bf16 and torch._scaled_grouped_mm in fp8 e4m3 with rowwise scales,
  over the valid rows only, the GEMM alone (no SwiGLU, no finalize); for the fused shapes also
  "+ op", the same GEMM followed by the torch op the fused kernel replaces (torch_moe): SwiGLU
  (in fp8 then the rowwise quantisation its next GEMM reads), or the router weights applied and
  the rows added into their tokens (index_add_).

Per shape: useful FLOPs = 2 * valid rows * N * K; bytes = NVFP4 weights and activations at 4.5
bits per value plus the output at its real size; floor = max(FLOPs / bf16 matmul rate, bytes /
copy bandwidth), both measured in this run. The issue's floors and targets are printed as met /
MISSED (``targets``), the full results go to DIR/bench_moe.json, and two markdown tables come
last: every implementation per shape, then one row per shape (``--summary`` reprints that one
from a saved bench_moe.json, without a GPU). Before the first shape, every kernel the selected
shapes can run is compiled into the kernel cache on all cores (stagebot.kernels.cute.warm).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TILE = 128
NVFP4_BYTES = 4.5 / 8  # per value: a 4-bit code and an 8-bit scale per 16 values
DECODE_TOKENS = 128  # shapes with at most this many tokens are the decode shapes
DEVICE = "cuda"
SWIGLU_AMAX = 32.0  # |linear * silu(gate)| stays below this: the SwiGLU output's global scale


@dataclass(frozen=True)
class Layer:
    prefix: str  # of its shapes' names
    experts: int
    local_experts: int  # the first ones are this rank's
    top_k: int
    hidden: int
    inter: int


LAYERS = (
    Layer("", 256, 8, 8, 7168, 2048),
    Layer("Qwen3-30B-A3B ", 128, 128, 8, 2048, 768),
    Layer("Mixtral-8x7B ", 8, 8, 2, 4096, 14336),
)


@dataclass(frozen=True)
class Shape:
    name: str
    kind: str  # "plain" | "swiglu" | "finalize"
    tokens: int
    experts: int  # routed experts of the model; the first local_experts are this rank's
    local_experts: int
    top_k: int
    n: int
    k: int


def layer_shapes(m: Layer, tokens: int) -> tuple[Shape, Shape]:
    """The layer's two GEMMs at ``tokens``: GEMM1 with SwiGLU, GEMM2 with finalize."""
    return (
        Shape(
            f"{m.prefix}T{tokens} GEMM1 SwiGLU", "swiglu", tokens, m.experts, m.local_experts,
            m.top_k, 2 * m.inter, m.hidden,
        ),
        Shape(
            f"{m.prefix}T{tokens} GEMM2 finalize", "finalize", tokens, m.experts, m.local_experts,
            m.top_k, m.hidden, m.inter,
        ),
    )  # fmt: skip


def shapes(quick: bool) -> list[Shape]:
    layers = [
        s
        for m in (LAYERS[:1] if quick else LAYERS)
        for t in ((16,) if quick else (16, 128, 8192))
        for s in layer_shapes(m, t)
    ]
    plain = Shape("S1 8x8192 N=K=4096", "plain", 8 * 8192, 8, 8, 1, 4096, 4096)
    return layers if quick else [plain, *layers]


@dataclass
class Problem:
    shape: Shape
    op_args: dict[str, dict[str, Any]]  # op -> its keyword arguments (ops API names)
    valid: Any  # bool [m]: rows inside a non-exiting tile and below its mn_limit
    padded_rows: int  # rows of the non-exiting tiles
    counts: list[int]  # valid rows per local expert
    expanded_to_permuted: Any  # int32 [tokens, top_k] from moe_sort (the unpermute's gather)


def _balanced_routing(tokens: int, experts: int, top_k: int):
    """[tokens, top_k] experts: token t takes g*t + (j % g) + stride * (j // g) (mod E), with
    g = 2 for an even top_k and stride = E * g / top_k. Each of the first experts gets
    max(1, tokens * top_k / E) rows, and a token that reaches them does so with g consecutive k,
    so the finalize sums more than one row per token."""
    import torch

    g = 2 if top_k % 2 == 0 else 1
    t, j = torch.arange(tokens).unsqueeze(1), torch.arange(top_k)
    return ((g * t + j % g + experts * g // top_k * (j // g)) % experts).int()


def build_problem(shape: Shape, seed: int) -> Problem:
    import torch

    from stagebot.kernels import moe_tables, ops

    g = torch.Generator(device=DEVICE).manual_seed(seed)
    tse = _balanced_routing(shape.tokens, shape.experts, shape.top_k).to(DEVICE)
    weights = torch.rand(tse.shape, generator=g, device=DEVICE)
    scales = weights / weights.sum(dim=1, keepdim=True)
    local_experts = shape.local_experts
    tables = ops.moe_sort(tse, scales, shape.experts, shape.top_k, 0, local_experts, TILE)
    x = torch.randn(shape.tokens, shape.k, generator=g, device=DEVICE)
    gs_x = (448.0 * 6 / x.abs().amax()).reshape(1)
    a, a_sf = ops.moe_permute(
        *ops.nvfp4_quantize(x, gs_x),
        tables.tile_idx_to_mn_limit,
        tables.permuted_idx_to_expanded_idx,
        tables.num_non_exiting_tiles,
        TILE,
        shape.top_k,
    )
    del x
    w = torch.randn(local_experts, shape.n, shape.k, generator=g, device=DEVICE)
    w /= math.sqrt(shape.k)  # GEMM outputs of unit scale
    gs_w = 448.0 * 6 / w.abs().amax(dim=(1, 2))
    b, b_sf = ops.nvfp4_quantize(w, gs_w)
    del w
    gemm = dict(
        a=a,
        b=b,
        a_sf=a_sf.reshape(-1),
        b_sf=b_sf.reshape(-1),
        alpha=(1.0 / (gs_x * gs_w)).float(),
        tile_idx_to_group_idx=tables.tile_idx_to_group_idx,
        num_non_exiting_tiles=tables.num_non_exiting_tiles,
        tile_size=TILE,
    )
    limits = dict(tile_idx_to_mn_limit=tables.tile_idx_to_mn_limit)
    finalize = dict(
        gemm,
        **limits,
        permuted_idx_to_expanded_idx=tables.permuted_idx_to_expanded_idx,
        token_final_scales=scales,
        num_tokens=shape.tokens,
        deterministic=False,
    )
    swiglu_gs = torch.tensor([448.0 * 6 / SWIGLU_AMAX], device=DEVICE)
    nnet = int(tables.num_non_exiting_tiles)
    valid = moe_tables.valid_rows(tables.tile_idx_to_mn_limit, nnet, TILE)
    local = tse.flatten().long()
    counts = torch.bincount(local[local < local_experts], minlength=local_experts).tolist()
    return Problem(
        shape=shape,
        op_args={
            # The MoE layer's GEMMs get the tile limits, as fused_moe passes them; S1 does not.
            "grouped_gemm": gemm if shape.kind == "plain" else dict(gemm, **limits),
            "grouped_gemm_swiglu": dict(gemm, global_sf=swiglu_gs, **limits),
            "grouped_gemm_finalize": finalize,
        },
        valid=valid,
        padded_rows=nnet * TILE,
        counts=counts,
        expanded_to_permuted=tables.expanded_idx_to_permuted_idx,
    )


# The kernels each kind of shape runs (fused, the deterministic finalize's fp32 rows, the
# unfused composition's GEMM step), and whether the call passes the tile limits.
KIND_KERNELS = {
    "plain": (("grouped_gemm", False),),
    "swiglu": (("grouped_gemm_swiglu", True), ("grouped_gemm", True)),
    "finalize": (
        ("grouped_gemm_finalize", True),
        ("grouped_gemm_f32_rows", True),
        ("grouped_gemm", True),
    ),
}


def compile_keys(shape: Shape) -> list:
    """The compile keys the shape's calls can ask for: every fitting tactic of each of its
    kernels (the autotuner times them all), as launch._run keys them."""
    from stagebot.kernels.cute.compile import DTYPES, KERNEL_EPILOGUE, CompileKey, kernel_class
    from stagebot.kernels.cute.launch import ARCH
    from stagebot.kernels.cute.tactics import TACTICS, effective

    keys = []
    for kernel, limits in KIND_KERNELS[shape.kind]:
        finalize = kernel == "grouped_gemm_finalize"
        top_k = shape.top_k if finalize else 1
        for tactic in dict.fromkeys(effective(t, limits) for t in TACTICS):
            fits, _ = kernel_class(tactic).can_implement(
                tactic, shape.n, shape.k, TILE, KERNEL_EPILOGUE[kernel]
            )
            for zeroed in (False, True) if finalize and fits else (False,) if fits else ():
                keys.append(
                    CompileKey(
                        kernel,
                        tactic,
                        DTYPES[kernel],
                        shape.n,
                        shape.k,
                        shape.local_experts,
                        TILE,
                        ARCH,
                        mn_limit=limits,
                        top_k=top_k,
                        zeroed_output=zeroed,
                    )  # fmt: skip
                )
    return keys


def warm_kernels(selected: list[Shape]) -> str:
    """Compiles the selected shapes' kernels into the disk cache on every core first (the
    autotuner then loads them), or says why not."""
    from stagebot.kernels.cute import disk_cache, warm

    folder = disk_cache.default_dir()
    if folder is None:
        return "not warmed: the kernel cache is off"
    report = warm.warm([k for s in selected for k in compile_keys(s)], folder, warm.default_jobs())
    return f"warmed: {report}"


# ---- implementations: each returns a no-argument callable (timed) producing the output ----

KIND_OP = {
    "plain": "grouped_gemm",
    "swiglu": "grouped_gemm_swiglu",
    "finalize": "grouped_gemm_finalize",
}


def _cute(op: str, args: dict[str, Any]) -> Callable[[], Any]:
    """The cute backend's implementation bound to ``args``, skipping the op API's validation."""
    from stagebot.kernels import backends

    impl = backends.resolve(op, "cute", args).implementations[op]
    return lambda: impl(**args)


def _fused(p: Problem, **overrides: Any) -> Callable[[], Any]:
    op = KIND_OP[p.shape.kind]
    return _cute(op, dict(p.op_args[op], **overrides))


def _fused_zeroed_aside(p: Problem) -> Callable[[], Any]:
    """The finalize kernel alone into an output zeroed outside the timed call, as fused_moe
    zeroes it on a side stream beside GEMM1 (the layer benchmark times that). The output is
    zeroed once, here: the first call's result is the checked one; later calls add on top
    (the same atomics whatever the values), so it is not checked for repeatability."""
    import torch

    args = p.op_args["grouped_gemm_finalize"]
    out = torch.zeros(args["num_tokens"], p.shape.n, dtype=torch.bfloat16, device=DEVICE)
    return _cute("grouped_gemm_finalize", dict(args, out=out, out_zeroed=True))


def _unfused_gemm_step(p: Problem) -> Callable[[], Any]:
    """The unfused composition's plain GEMM alone (unchecked): unfused minus this is what its
    elementwise step costs."""
    return _cute("grouped_gemm", p.op_args["grouped_gemm"])


def _unfused_swiglu(p: Problem) -> Callable[[], Any]:
    from stagebot.kernels.triton_elementwise import swiglu_quantize

    gemm, rows = _unfused_gemm_step(p), p.padded_rows
    global_sf = p.op_args["grouped_gemm_swiglu"]["global_sf"]
    return lambda: swiglu_quantize(gemm()[:rows], global_sf)


def _unfused_finalize(p: Problem) -> Callable[[], Any]:
    from stagebot.kernels.triton_elementwise import unpermute

    gemm = _unfused_gemm_step(p)
    scales = p.op_args["grouped_gemm_finalize"]["token_final_scales"]
    return lambda: unpermute(gemm(), p.expanded_to_permuted, scales)


def _peer_operands(p: Problem, dtype):
    import torch

    rows, s = sum(p.counts), p.shape
    x = torch.randn(rows, s.k, device=DEVICE, dtype=torch.bfloat16).to(dtype)
    w = torch.randn(s.local_experts, s.n, s.k, device=DEVICE, dtype=torch.bfloat16).to(dtype)
    offs = torch.tensor(p.counts, device=DEVICE).cumsum(0).int()
    return x, w.transpose(-2, -1), offs


def _peer_bf16(p: Problem) -> Callable[[], Any]:
    import torch

    x, wt, offs = _peer_operands(p, torch.bfloat16)
    return lambda: torch._grouped_mm(x, wt, offs=offs, out_dtype=torch.bfloat16)


def _peer_fp8(p: Problem) -> Callable[[], Any]:
    import torch

    x, wt, offs = _peer_operands(p, torch.float8_e4m3fn)
    scale_a = torch.ones(x.shape[0], device=DEVICE)  # rowwise: one per row of x
    scale_b = torch.ones(wt.shape[0], wt.shape[2], device=DEVICE)  # one per (expert, n)
    return lambda: torch._scaled_grouped_mm(
        x, wt, scale_a, scale_b, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True
    )


def _with_replaced_op(peer: Callable[[Problem], Callable[[], Any]], fp8: bool):
    """The peer GEMM followed by the torch op the fused kernel replaces: SwiGLU (in fp8, then
    the rowwise quantisation the next fp8 GEMM reads), or the router weights applied and the rows
    added into their tokens."""

    def make(p: Problem) -> Callable[[], Any]:
        from stagebot.kernels.cute import torch_moe

        gemm = peer(p)
        if p.shape.kind == "swiglu":
            if fp8:
                return lambda: torch_moe.fp8_rowwise(torch_moe.swiglu(gemm()))
            return lambda: torch_moe.swiglu(gemm())
        args = p.op_args["grouped_gemm_finalize"]
        expanded = args["permuted_idx_to_expanded_idx"][p.valid].long()  # expert order, as offs
        token, weight = expanded // p.shape.top_k, args["token_final_scales"].reshape(-1)[expanded]
        return lambda: torch_moe.unpermute_reduce(gemm(), token, weight, p.shape.tokens)

    return make


PEERS = {"bf16 peer": _peer_bf16, "fp8 peer": _peer_fp8}
FAIR_PEERS = {  # the fused kinds' peers with the op they replace
    "bf16 peer + op": _with_replaced_op(_peer_bf16, fp8=False),
    "fp8 peer + op": _with_replaced_op(_peer_fp8, fp8=True),
}
ZEROED_ASIDE = "ours fused, out zeroed aside"  # the kernel alone; fused_moe's zeroing not timed
OURS = {
    "plain": {"ours": _fused},
    "swiglu": {
        "ours fused": _fused,
        "ours unfused": _unfused_swiglu,
        "unfused GEMM step": _unfused_gemm_step,
    },
    "finalize": {
        "ours fused": _fused,
        ZEROED_ASIDE: _fused_zeroed_aside,
        "ours fused det": lambda p: _fused(p, deterministic=True),
        "ours unfused": _unfused_finalize,
        "unfused GEMM step": _unfused_gemm_step,
    },
}
PRIMARY = {"plain": "ours", "swiglu": "ours fused", "finalize": "ours fused"}


# ---- correctness against backend="reference" ----


def reference(p: Problem):
    from stagebot.kernels import ops

    op = KIND_OP[p.shape.kind]
    return getattr(ops, op)(**p.op_args[op], backend="reference")


def check(p: Problem, got, want) -> dict:
    if p.shape.kind == "swiglu":
        return _check_swiglu(p, got, want)
    if p.shape.kind == "plain":
        got, want = got[p.valid], want[p.valid]
    return compare(got, want)


def compare(got, want) -> dict:
    """ok when > 99% of the elements are close and the relative error is < 1%."""
    import torch

    got, want = got.float(), want.float()
    # atol: 1% of the largest value, so that rows rounded to bf16 before the weighted sum (where
    # the k terms cancel) pass; a wrong row, weight or scale does not.
    atol = 1e-2 * want.abs().max().item()
    close = torch.isclose(got, want, rtol=1.6e-2, atol=atol).float().mean().item()
    rel = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
    return dict(ok=close > 0.99 and rel < 1e-2, close_fraction=close, rel_err=rel)


def _check_swiglu(p: Problem, got, want) -> dict:
    from stagebot.kernels import layouts

    def valid_rows(c, c_sf):
        rows, cols = c.shape[0], c.shape[1] // 8  # n/2 values per row, one scale per 16
        sf = layouts.unswizzle_sf(c_sf.reshape(-1), rows, cols)
        keep = p.valid[:rows]
        return c[keep], sf[keep]

    (c, sf), (want_c, want_sf) = valid_rows(*got), valid_rows(*want)
    codes = (c == want_c).float().mean().item()
    scales = (sf == want_sf).float().mean().item()
    return dict(ok=codes >= 0.95 and scales >= 0.95, codes_equal=codes, scales_equal=scales)


# ---- measurement ----


def machine_rates() -> dict:
    """bf16 dense matmul rate (8192^3) and device-to-device copy bandwidth (2 GiB)."""
    import torch

    from stagebot.kernels.cute.timing import time_us

    a = torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16)
    matmul_us = time_us(lambda: torch.matmul(a, a))["us"]
    src = torch.empty(2 << 30, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    copy_us = time_us(lambda: dst.copy_(src))["us"]
    return dict(
        bf16_tflops=2 * 8192**3 / matmul_us / 1e6, copy_gbps=2 * src.numel() / copy_us / 1e3
    )


def useful_work(p: Problem) -> tuple[float, float]:
    """(FLOPs, bytes) of the shape: NVFP4 inputs at 4.5 bits per value, outputs as stored."""
    s, rows = p.shape, sum(p.counts)
    out = {
        "plain": rows * s.n * 2,
        "swiglu": rows * s.n // 2 * NVFP4_BYTES,
        "finalize": s.tokens * s.n * 2,
    }[s.kind]
    inputs = (rows + s.local_experts * s.n) * s.k * NVFP4_BYTES
    return 2.0 * rows * s.n * s.k, inputs + out


def short_error(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error)[:400]}"


def measure_impl(p: Problem, make, want, errors: list[str], label: str) -> dict:
    """Checks (against ``want``, if given) and times one implementation; its cute launches'
    tactics ("tactics": kernel -> the tactic the autotuner picked) when it made any."""
    from stagebot.kernels.cute import autotune
    from stagebot.kernels.cute.timing import time_us

    result: dict[str, Any] = {}
    before = autotune.launched.copy()
    try:
        fn = make(p)
        if want is not None:
            result["check"] = check(p, fn(), want)
            if p.shape.kind == "finalize" and not label.endswith(ZEROED_ASIDE):
                repeatable = bool((fn() == fn()).all())
                result["check"]["repeatable"] = repeatable
                if label.endswith(" det"):  # deterministic=True promises bit-identical runs
                    result["check"]["ok"] &= repeatable
        result.update(time_us(fn))
    except Exception as error:  # one failure must not hide the others
        traceback.print_exc()
        result["error"] = short_error(error)
        errors.append(f"{label}: {result['error']}")
    if launched := autotune.launched - before:
        result["tactics"] = {kernel: tactic for kernel, tactic in sorted(launched)}
    print(json.dumps({label: result}), flush=True)
    return result


def run_shape(shape: Shape, rates: dict, errors: list[str], seed: int) -> dict:
    import torch

    p = build_problem(shape, seed)
    flops, nbytes = useful_work(p)
    compute_floor_us = flops / rates["bf16_tflops"] / 1e6
    byte_floor_us = nbytes / rates["copy_gbps"] / 1e3
    want = None
    try:
        want = reference(p)
    except Exception as error:
        errors.append(f"{shape.name} reference: {short_error(error)}")
        traceback.print_exc()
    impls = {}
    peers = PEERS if shape.kind == "plain" else {**PEERS, **FAIR_PEERS}
    for name, make in {**OURS[shape.kind], **peers}.items():
        checked_against = want if name.startswith("ours") else None
        impls[name] = measure_impl(p, make, checked_against, errors, f"{shape.name} / {name}")
    for r in impls.values():
        if "us" in r:
            r["tflops"] = flops / r["us"] / 1e6
            r["gbps"] = nbytes / r["us"] / 1e3
    del p, want
    torch.cuda.empty_cache()
    result = dict(
        name=shape.name,
        kind=shape.kind,
        tokens=shape.tokens,
        n=shape.n,
        k=shape.k,
        flops=flops,
        bytes=nbytes,
        floor_us=max(compute_floor_us, byte_floor_us),
        compute_floor_us=compute_floor_us,
        byte_floor_us=byte_floor_us,
        impls=impls,
    )
    result["targets"] = targets(result)
    return result


def targets(r: dict) -> list[dict]:
    """The issue's floors and targets for one shape: (what, value, needed, met)."""
    us = {name: i["us"] for name, i in r["impls"].items() if "us" in i}
    ours, bf16, fp8 = us.get(PRIMARY[r["kind"]]), us.get("bf16 peer"), us.get("fp8 peer")
    rows: list[dict] = []

    def add(what: str, value: float | None, need: float, better: str = "higher"):
        met = None if value is None else (value >= need if better == "higher" else value <= need)
        rows.append(dict(what=what, value=value, need=need, met=met))

    def ratio(num, den):
        return num / den if num and den else None

    if r["kind"] == "plain":
        add("floor: ours TF/s / bf16 peer TF/s", ratio(bf16, ours), 0.6)
        add("target: ours TF/s", ratio(r["flops"] / 1e6, ours), 600.0)
    if r["kind"] != "plain" and r["tokens"] <= DECODE_TOKENS:
        add("floor: speedup over bf16 peer", ratio(bf16, ours), 1.5)
        add("target: time / byte floor", ratio(ours, r["byte_floor_us"]), 2.0, better="lower")
        add("target: speedup over fp8 peer", ratio(fp8, ours), 1.0 + 1e-9)
    fusion = {"swiglu": 1.3, "finalize": 1.2}.get(r["kind"])
    if fusion:
        unfused = us.get("ours unfused")
        add("floor: fused speedup over unfused", ratio(unfused, ours), 1.0 + 1e-9)
        add("target: fused speedup over unfused", ratio(unfused, ours), fusion)
        if r["kind"] == "finalize":
            det = us.get("ours fused det")
            add("info: fused det speedup over unfused", ratio(unfused, det), 1.0 + 1e-9)
    return rows


# ---- report ----


def cell(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def run_tuned(items: list, run_one: Callable[[Any, int], dict], results: dict) -> dict:
    """run_one(item, seed) for each item (Shape or Case) with the autotuner on, its row appended
    to results["shapes"] or results["cases"]; a failure is recorded in results["errors"] and hides
    no other. Prints and returns the autotuner's measurements; its failures become errors."""
    from stagebot.kernels.cute import autotune

    rows = results["cases" if "cases" in results else "shapes"]
    with autotune.tuning():
        for seed, item in enumerate(items):
            try:
                rows.append(run_one(item, seed))
            except Exception as error:
                results["errors"].append(f"{item.name}: {short_error(error)}")
                traceback.print_exc()
    results["errors"] += [f"autotune {key}: {why}" for key, why in autotune.failures.items()]
    print_autotune(autotune.measurements)
    return {repr(key): ms for key, ms in autotune.measurements.items()}


def print_autotune(measurements: dict) -> None:
    print("\n== autotuner: median ms per tactic, per (kernel, b shape, tile, row bucket) ==")
    for key, timings in measurements.items():
        best = min(timings, key=timings.get)
        cells = "  ".join(f"{t}={ms:.3f}" for t, ms in timings.items())
        print(f"{key[0]} {key[1]} rows<={key[-1]}: picked {best}; {cells}")


def print_report(results: dict) -> None:
    print("\n== floors and targets ==")
    for s in results["shapes"]:
        for t in s["targets"]:
            met = {True: "met", False: "MISSED", None: "n/a"}[t["met"]]
            print(
                f"{s['name']:<22} {t['what']:<40} {cell(t['value'], '.2f'):>8} "
                f"(need {t['need']:.3g}) {met}"
            )
    for e in results["errors"]:
        print("ERROR", e[:300])
    print("\n| shape | impl | us | TFLOP/s | GB/s | x floor | vs bf16 | check |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for s in results["shapes"]:
        bf16 = s["impls"].get("bf16 peer", {}).get("us")
        for name, i in s["impls"].items():
            us = i.get("us")
            chk = i.get("check")
            status = [("ok" if chk["ok"] else "FAIL")] if chk else []
            status = " ".join(status + (["error"] if "error" in i else [])) or "-"
            print(
                f"| {s['name']} | {name} | {cell(us)} | {cell(i.get('tflops'))} "
                f"| {cell(i.get('gbps'), '.0f')} | {cell(us and us / s['floor_us'], '.2f')} "
                f"| {cell(bf16 and us and bf16 / us, '.2f')} | {status} |"
            )


def ratio(num: float | None, den: float | None) -> str:
    return cell(num and den and num / den, ".2f")


def verdict(impls: dict[str, dict]) -> str:
    """A row's checks: "error" if an implementation raised, else "ok" or "FAIL"."""
    checks = [i["check"]["ok"] for i in impls.values() if "check" in i]
    if any("error" in i for i in impls.values()):
        return "error"
    return "ok" if checks and all(checks) else "FAIL"


def any_failed(rows: list[dict]) -> bool:
    """Whether a check of any implementation of any row failed."""
    return any(not i["check"]["ok"] for r in rows for i in r["impls"].values() if "check" in i)


def tactic_cell(impls: dict[str, dict], primary: str) -> str:
    """The tactic ours (fused) ran with, and the zeroed-aside kernel's where it differs (each
    key is tuned apart); "-" for a run saved before the tactics were recorded."""
    tactics = [
        t
        for name in (primary, ZEROED_ASIDE)
        for t in impls.get(name, {}).get("tactics", {}).values()
    ]
    if not tactics:
        return "-"
    aside = [t for t in tactics[1:] if t != tactics[0]]
    return tactics[0] + "".join(f" (zeroed aside: {t})" for t in aside)


def summary_lines(results: dict) -> list[str]:
    """One markdown row per shape: ours (fused), unfused with its GEMM step, the deterministic
    finalize, the peers (the GEMM alone, then with the op the fused kernel replaces), peer / ours
    ratios, unfused / fused, the finalize kernel alone into an output zeroed aside (as
    fused_moe runs it; the zeroing beside GEMM1 is in the layer benchmark's time, not here)
    with the bf16 peer over it, the reference checks and the tactic ours ran with."""
    lines = [
        "| shape | ours fused | unfused (GEMM step) | det | bf16 peer | fp8 peer | x bf16 "
        "| x fp8 | bf16 + op | fp8 + op | x bf16 + op | x fp8 + op | fused/unfused "
        "| fused, out zeroed aside (kernel only) | x bf16 (zeroed aside) | check | tactic |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for s in results["shapes"]:
        impls = s["impls"]
        us = {name: i.get("us") for name, i in impls.items()}
        ours = us.get(PRIMARY[s["kind"]])
        bf16, fp8, unfused = us.get("bf16 peer"), us.get("fp8 peer"), us.get("ours unfused")
        bf16_op, fp8_op = us.get("bf16 peer + op"), us.get("fp8 peer + op")
        aside = us.get(ZEROED_ASIDE)

        ours_cell = cell(ours)
        if s["kind"] == "plain" and ours:
            ours_cell += f" ({s['flops'] / ours / 1e6:.1f} TF/s)"
        step = cell(us.get("unfused GEMM step"))
        unfused_cell = "-" if unfused is None else f"{unfused:.1f} ({step})"
        lines.append(
            f"| {s['name']} | {ours_cell} | {unfused_cell} | {cell(us.get('ours fused det'))} "
            f"| {cell(bf16)} | {cell(fp8)} | {ratio(bf16, ours)} | {ratio(fp8, ours)} "
            f"| {cell(bf16_op)} | {cell(fp8_op)} | {ratio(bf16_op, ours)} | {ratio(fp8_op, ours)} "
            f"| {ratio(unfused, ours)} | {cell(aside)} | {ratio(bf16, aside)} | {verdict(impls)} "
            f"| {tactic_cell(impls, PRIMARY[s['kind']])} |"
        )
    return lines


def _saved_summary(parser: argparse.ArgumentParser, path: Path) -> list[str]:
    """The summary of a saved bench_layer.json (it has "cases") or bench_moe.json."""
    from stagebot.kernels.cute import bench_layer

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        parser.error(f"--summary {path}: cannot be read ({error.strerror})")
    try:
        results = json.loads(text)
        layer = isinstance(results, dict) and "cases" in results
        return (bench_layer.summary_lines if layer else summary_lines)(results)
    except (ValueError, KeyError, TypeError) as error:
        parser.error(
            f"--summary {path}: not the bench_moe.json or bench_layer.json of a run ({error!r}); "
            "give the file `--out DIR` wrote"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="folder for bench_moe.json")
    parser.add_argument("--quick", action="store_true", help="the 16-token layer only")
    parser.add_argument(
        "--only", action="append", default=[], metavar="TEXT",
        help="keep the shapes whose name holds TEXT (repeatable: every TEXT)",
    )  # fmt: skip
    parser.add_argument(
        "--layer", action="store_true",
        help="time the whole MoE layer against the torch compositions (bench_layer) instead",
    )  # fmt: skip
    parser.add_argument(
        "--summary", metavar="JSON", type=Path,
        help="print the summary table of an earlier run's bench_moe.json or bench_layer.json "
        "and exit (no GPU)",
    )  # fmt: skip
    opts = parser.parse_args(argv)
    if opts.summary is not None:
        print("\n".join(_saved_summary(parser, opts.summary)))
        return 0
    if opts.layer:
        from stagebot.kernels.cute import bench_layer

        try:
            layers = bench_layer.select(opts.quick, opts.only)
        except ValueError as error:
            parser.error(str(error))
        return bench_layer.run(layers, Path(opts.out))
    import torch

    selected = [s for s in shapes(opts.quick) if all(t in s.name for t in opts.only)]
    if not selected:
        names = ", ".join(s.name for s in shapes(opts.quick))
        parser.error(f"--only {' '.join(opts.only)} matches no shape; the shapes are: {names}")
    out_dir = Path(opts.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = dict(
        device=torch.cuda.get_device_name(), torch=torch.__version__, shapes=[], errors=[]
    )
    print(results["device"], results["torch"], flush=True)
    print(warm_kernels(selected), flush=True)
    results["rates"] = rates = machine_rates()
    print(json.dumps(rates), flush=True)
    results["autotune"] = run_tuned(
        selected, lambda shape, seed: run_shape(shape, rates, results["errors"], seed), results
    )
    (out_dir / "bench_moe.json").write_text(json.dumps(results, indent=1))
    print_report(results)
    print("\n== summary (python3 -m stagebot.kernels.cute.bench_moe --summary JSON reprints it) ==")
    print("\n".join(summary_lines(results)))
    return 1 if results["errors"] or any_failed(results["shapes"]) else 0


if __name__ == "__main__":
    sys.exit(main())
