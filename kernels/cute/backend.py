"""The ``cute`` backend: registers the Hopper CuTe DSL kernels with the op dispatcher.

``can_implement`` says no (with the reason) unless: the tensors are on a CUDA sm_90 GPU,
nvidia-cutlass-dsl is importable, the kernels have passed their GPU correctness check
(``GPU_VERIFIED``), and a tactic fits the call (the pinned one, if one is pinned). So on CPU
machines ``backend="auto"`` keeps choosing the reference, and no untested kernel is ever chosen
silently. Which fitting tactic runs is stagebot.kernels.cute.autotune's choice.

``grouped_gemm_finalize`` with ``deterministic=True`` runs the plain GEMM with fp32 rows, then
sums each token's rows over k in order in fp32 (the Triton gather-sum
stagebot.kernels.triton_elementwise.unpermute): no atomics.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any

from stagebot.kernels import moe_pipeline, moe_tables
from stagebot.kernels.backends import Backend, register
from stagebot.kernels.cute import autotune
from stagebot.kernels.cute.tactics import TACTICS, Tactic, effective

# The kill switch for dispatch: True only while the kernels pass their GPU checks on an H200
# (kernels/cute/NOTES.md says which commit each run checked: the suite with --moe-backend cute,
# bench_moe's reference checks, gpu_check).
GPU_VERIFIED = True
PRIORITY = 10  # above the reference (0)


def _missing_module(module: str, why: str) -> str:
    return "" if importlib.util.find_spec(module) else f"{module} is not importable: {why}"


def _device_reason(a: Any) -> str:
    """'' if ``a`` lives on a CUDA sm_90 device, else why not."""
    import torch

    if not isinstance(a, torch.Tensor) or a.device.type != "cuda":
        return "the tensors are not on a CUDA device"
    major, minor = torch.cuda.get_device_capability(a.device)
    if (major, minor) != (9, 0):
        return (
            f"the GPU is sm_{major}{minor}; the cute kernels are built and tested for sm_90a only"
        )
    return ""


def _kernel_of(op: str, args: dict[str, Any]) -> str:
    if op == "grouped_gemm_finalize" and args.get("deterministic"):
        return "grouped_gemm_f32_rows"
    return op


def _fitting(kernel: str, tactics: tuple[Tactic, ...], fits: Callable) -> tuple[list[Tactic], str]:
    """(tactics of ``tactics`` that fit, every refusal); the pinned tactic alone if pinned."""
    pinned = autotune.pinned()
    chosen, refusals = [], []
    for tactic in (pinned,) if pinned else tactics:
        ok, why = fits(tactic, kernel)
        if ok and tactic.fp16_operand:
            why = _missing_module(
                "triton",
                f"tactic {tactic} makes its fp16 operand with Triton (pip install triton; the "
                "other tactics do not need it)",
            )
            ok = not why
        if ok:
            chosen.append(tactic)
        else:
            refusals.append(f"pinned {why}" if pinned else why)
    return chosen, "; ".join(refusals)


def _operand_fit(args: dict[str, Any]) -> Callable:
    from stagebot.kernels.cute.launch import problem_support

    a, b, a_sf, b_sf = args["a"], args["b"], args["a_sf"], args["b_sf"]
    return lambda tactic, kernel: problem_support(
        tactic, a, b, a_sf, b_sf, args["tile_size"], kernel
    )


def _moe_fit(args: dict[str, Any]) -> Callable:
    """Fit of fused_moe's two GEMMs: their shapes, and the weights as TMA reads them (the
    activations are made inside, dense and aligned)."""
    from stagebot.kernels.cute.compile import KERNEL_EPILOGUE, kernel_class
    from stagebot.kernels.cute.launch import alignment_problem

    w1, w2, tile_size = args["w1"], args["w2"], args["tile_size"]
    (_, n1, half_k1), (_, n2, half_k2) = w1.shape, w2.shape
    shapes = {"grouped_gemm_swiglu": (n1, 2 * half_k1)}
    if args["disable_finalize_fusion"]:
        shapes["grouped_gemm"] = (n2, 2 * half_k2)
    else:
        shapes[_kernel_of("grouped_gemm_finalize", args)] = (n2, 2 * half_k2)

    weights = {name: args[name] for name in ("w1", "w1_sf", "w2", "w2_sf")}
    weights_problem = alignment_problem(weights, "TMA")

    def fits(tactic: Tactic, _kernel: str) -> tuple[bool, str]:
        if weights_problem:
            return False, weights_problem
        for kernel, (n, k) in shapes.items():
            ok, why = kernel_class(tactic).can_implement(
                tactic, n, k, tile_size, KERNEL_EPILOGUE[kernel]
            )
            if not ok:
                return False, f"{kernel}: {why}"
        return True, ""

    return fits


def _runs_deterministic_finalize(op: str, args: dict[str, Any]) -> bool:
    finalize = op == "grouped_gemm_finalize" or not args.get("disable_finalize_fusion")
    return op in ("grouped_gemm_finalize", "fused_moe") and finalize and args["deterministic"]


def can_implement(op: str, **args: Any) -> tuple[bool, str]:
    reason = _device_reason(args.get("x" if op == "fused_moe" else "a"))
    reason = reason or _missing_module("cutlass", "pip install 'nvidia-cutlass-dsl==4.3.5'")
    if not reason and _runs_deterministic_finalize(op, args):
        reason = _missing_module(
            "triton",
            "deterministic=True sums with a Triton kernel (pip install triton, or pass "
            "deterministic=False)",
        )
    if not reason and not GPU_VERIFIED:
        reason = "the cute kernels have not passed their GPU correctness check yet"
    if reason:
        return False, reason
    fit = _moe_fit(args) if op == "fused_moe" else _operand_fit(args)
    tactics, why = _fitting(_kernel_of(op, args), TACTICS, fit)
    return (True, "") if tactics else (False, why)


def _launch(kernel: str, args: dict[str, Any], run: Callable[[Tactic, Any], Any], scratch):
    """Runs ``run(tactic, None)`` with the tactic autotune picks among those that fit;
    ``scratch()`` makes the outputs a timed trial may overwrite."""
    from stagebot.kernels.errors import KernelArgumentError

    tactics, why = _fitting(kernel, TACTICS, _operand_fit(args))
    if not tactics:
        raise KernelArgumentError(f"the cute {kernel} cannot take this call: {why}")
    a, b = args["a"], args["b"]
    has_limit = args.get("tile_idx_to_mn_limit") is not None
    # Without the limits a sparse_rows tactic runs as its dense twin: time and count that one.
    reads_limit = has_limit or kernel == "grouped_gemm_finalize"
    tactics = list(dict.fromkeys(effective(tactic, reads_limit) for tactic in tactics))
    # A finalize into a zeroed output is another kernel (no fill inside): tuned apart.
    zeroed = bool(args.get("out_zeroed"))
    key = (kernel, tuple(b.shape), args["tile_size"], has_limit, autotune.row_bucket(a.shape[0]))
    key += ("zeroed",) if zeroed else ()
    outputs: list[Any] = []

    def trial(tactic: Tactic) -> None:
        outputs[:] = outputs or [scratch()]
        run(tactic, outputs[0])

    tactic = autotune.choose(key, tactics, trial)
    autotune.record_launch(kernel, tactic)
    return run(tactic, None)


def _operands(args: dict[str, Any]) -> tuple:
    return tuple(
        args[name]
        for name in (
            "a",
            "b",
            "a_sf",
            "b_sf",
            "alpha",
            "tile_idx_to_group_idx",
            "num_non_exiting_tiles",
        )
    )


def grouped_gemm(**args: Any):
    return _grouped_gemm_rows(args, "grouped_gemm")


def _grouped_gemm_rows(args: dict[str, Any], kernel: str):
    """The plain kernel's rows: bf16, or fp32 for kernel "grouped_gemm_f32_rows"."""
    import torch

    from stagebot.kernels.cute import launch

    dtype = torch.float32 if kernel == "grouped_gemm_f32_rows" else torch.bfloat16

    def outputs():
        return launch.grouped_gemm_outputs(args["a"], args["b"], dtype)

    def run(tactic: Tactic, out):
        return launch.grouped_gemm(
            *_operands(args),
            args["tile_size"],
            tile_idx_to_mn_limit=args.get("tile_idx_to_mn_limit"),
            tactic=tactic,
            out=outputs() if out is None else out,
        )

    return _launch(kernel, args, run, outputs)


def grouped_gemm_swiglu(**args: Any):
    from stagebot.kernels.cute import launch

    def run(tactic: Tactic, out):
        return launch.grouped_gemm_swiglu(
            *_operands(args),
            args["global_sf"],
            args["tile_size"],
            tile_idx_to_mn_limit=args.get("tile_idx_to_mn_limit"),
            tactic=tactic,
            out=out,
        )

    return _launch(
        "grouped_gemm_swiglu", args, run, lambda: launch.swiglu_outputs(args["a"], args["b"])
    )


def grouped_gemm_finalize(**args: Any):
    from stagebot.kernels.cute import launch

    if args["deterministic"]:
        return moe_tables.finalize_into(
            args.get("out"), _deterministic_finalize(args), args.get("out_zeroed", False)
        )

    def run(tactic: Tactic, out):
        # The call's own output for the real launch; a trial's scratch output is never zeroed
        # (what it holds afterwards is thrown away).
        return launch.grouped_gemm_finalize(
            *_operands(args),
            args["tile_idx_to_mn_limit"],
            args["permuted_idx_to_expanded_idx"],
            args["token_final_scales"],
            args["num_tokens"],
            args["tile_size"],
            tactic=tactic,
            out=args.get("out") if out is None else out,
            out_zeroed=args.get("out_zeroed", False),
        )

    def scratch():
        return launch.finalize_outputs(args["a"], args["b"], args["num_tokens"])

    return _launch("grouped_gemm_finalize", args, run, scratch)


def _deterministic_finalize(args: dict[str, Any]):
    """The plain GEMM's fp32 rows, then a sum per token over k in order (no atomics)."""
    from stagebot.kernels.triton_elementwise import unpermute

    rows = _grouped_gemm_rows(args, "grouped_gemm_f32_rows")
    scales = args["token_final_scales"]
    valid = moe_tables.valid_rows(
        args["tile_idx_to_mn_limit"], args["num_non_exiting_tiles"], args["tile_size"]
    )
    e2p = moe_tables.expanded_to_permuted(
        args["permuted_idx_to_expanded_idx"], valid, scales.numel()
    )
    return unpermute(rows, e2p.view(scales.shape), scales)


register(
    Backend(
        name="cute",
        priority=PRIORITY,
        implementations={
            "grouped_gemm": grouped_gemm,
            "grouped_gemm_swiglu": grouped_gemm_swiglu,
            "grouped_gemm_finalize": grouped_gemm_finalize,
            "fused_moe": functools.partial(moe_pipeline.fused_moe, backend="cute"),
        },
        can_implement=can_implement,
        devices=("cuda",),
    )
)
