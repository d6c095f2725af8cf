"""The ``cute`` backend: registers the Hopper CuTe DSL kernels with the op dispatcher.

``can_implement`` says no (with the reason) unless: the tensors are on a CUDA sm_90 GPU,
nvidia-cutlass-dsl is importable, the kernel has passed its GPU correctness check
(``GPU_VERIFIED``), and a tactic fits the call. So on CPU machines ``backend="auto"`` keeps
choosing the reference, and no untested kernel is ever chosen silently.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from stagebot.kernels.backends import Backend, register
from stagebot.kernels.cute.tactics import TACTICS

# The kill switch for dispatch: True only while the kernel passes gpu_check on an H200. It passed
# on 2026-11-29 (9 of 9 checks bit-exact vs the reference, exiting tiles untouched; NOTES.md).
GPU_VERIFIED = True
PRIORITY = 10  # above the reference (0)


def _cutlass_importable() -> bool:
    return importlib.util.find_spec("cutlass") is not None


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


def can_implement(op: str, **args: Any) -> tuple[bool, str]:
    reason = _device_reason(args.get("a"))
    if reason:
        return False, reason
    if not _cutlass_importable():
        return False, "nvidia-cutlass-dsl is not installed (pip install stagebot[kernels])"
    if not GPU_VERIFIED:
        return False, "the cute grouped_gemm has not passed its GPU correctness check yet"
    return _pick_tactic(args)[1:]


def _pick_tactic(args: dict[str, Any]):
    """(tactic or None, ok, why): the first tactic of the dispatcher's list that fits the call."""
    from stagebot.kernels.cute.launch import problem_support

    why = "no tactic"
    for tactic in TACTICS:
        ok, why = problem_support(
            tactic, args["a"], args["b"], args["a_sf"], args["b_sf"], args["tile_size"]
        )
        if ok:
            return tactic, True, ""
    return None, False, why


def grouped_gemm(
    *, a, b, a_sf, b_sf, alpha, tile_idx_to_group_idx, num_non_exiting_tiles, tile_size
):
    from stagebot.kernels.cute import launch

    tactic, ok, why = _pick_tactic(dict(a=a, b=b, a_sf=a_sf, b_sf=b_sf, tile_size=tile_size))
    if not ok:
        from stagebot.kernels.errors import KernelArgumentError

        raise KernelArgumentError(f"the cute grouped_gemm cannot take this call: {why}")
    return launch.grouped_gemm(
        a,
        b,
        a_sf,
        b_sf,
        alpha,
        tile_idx_to_group_idx,
        num_non_exiting_tiles,
        tile_size,
        tactic=tactic,
    )


register(
    Backend(
        name="cute",
        priority=PRIORITY,
        implementations={"grouped_gemm": grouped_gemm},
        can_implement=can_implement,
    )
)
