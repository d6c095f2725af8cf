"""The ``cute-sm100`` backend: the Blackwell block-scaled NVFP4 kernels (sm100_gemm).

Compiled, not run on hardware: this project has only an H200, so the kernels are built for
sm_100a in CI and have never run. The backend is never chosen by ``backend="auto"`` (its
priority is below the reference's, which implements every call) and, while ``GPU_VERIFIED`` is
False, refuses every call it is named for with that sentence, so a B200 stage forced onto it
(``--moe-backend cute-sm100``) reports it for each case and fails, rather than publishing
numbers from an unchecked kernel. Whoever first runs gpu_check and the suite on a B200 sets it.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

from stagebot.kernels import moe_pipeline
from stagebot.kernels.backends import Backend, register
from stagebot.kernels.cute.tactics import SM100_TACTICS

NAME = "cute-sm100"
GPU_VERIFIED = False
PRIORITY = -10  # below the reference (0): "auto" never reaches it
NOT_RUN = (
    "the cute-sm100 kernels are compiled for sm_100a, not run on hardware (no B200 has run "
    "their checks; stagebot.kernels.cute.backend_sm100.GPU_VERIFIED)"
)
TACTIC = SM100_TACTICS[0]


def _refusal(op: str, args: dict[str, Any]) -> str:
    """'' if the call can run here, else why not; the unverified state comes first."""
    if not GPU_VERIFIED:
        return NOT_RUN
    import torch

    a = args.get("x" if op == "fused_moe" else "a")
    if not isinstance(a, torch.Tensor) or a.device.type != "cuda":
        return "the tensors are not on a CUDA device"
    major, minor = torch.cuda.get_device_capability(a.device)
    if (major, minor) != (10, 0):
        return f"the GPU is sm_{major}{minor}; the cute-sm100 kernels are built for sm_100a"
    if importlib.util.find_spec("cutlass") is None:
        return "cutlass is not importable: pip install 'nvidia-cutlass-dsl==4.3.5'"
    if args.get("deterministic"):
        return "deterministic=True is not implemented on sm_100a (pass deterministic=False)"
    return ""


def can_implement(op: str, **args: Any) -> tuple[bool, str]:
    why = _refusal(op, args)
    if why:
        return False, why
    from stagebot.kernels.cute.launch import problem_support

    if op == "fused_moe":
        return True, ""
    return problem_support(
        TACTIC, args["a"], args["b"], args["a_sf"], args["b_sf"], args["tile_size"], op
    )


def _operands(args: dict[str, Any]) -> tuple:
    names = ("a", "b", "a_sf", "b_sf", "alpha", "tile_idx_to_group_idx", "num_non_exiting_tiles")
    return tuple(args[name] for name in names)


def grouped_gemm(**args: Any):
    from stagebot.kernels.cute import launch

    return launch.grouped_gemm(
        *_operands(args),
        args["tile_size"],
        tile_idx_to_mn_limit=args.get("tile_idx_to_mn_limit"),
        tactic=TACTIC,
    )


def grouped_gemm_swiglu(**args: Any):
    from stagebot.kernels.cute import launch

    return launch.grouped_gemm_swiglu(
        *_operands(args),
        args["global_sf"],
        args["tile_size"],
        tile_idx_to_mn_limit=args.get("tile_idx_to_mn_limit"),
        tactic=TACTIC,
    )


def grouped_gemm_finalize(**args: Any):
    from stagebot.kernels.cute import launch

    return launch.grouped_gemm_finalize(
        *_operands(args),
        args["tile_idx_to_mn_limit"],
        args["permuted_idx_to_expanded_idx"],
        args["token_final_scales"],
        args["num_tokens"],
        args["tile_size"],
        tactic=TACTIC,
        out=args.get("out"),
        out_zeroed=args.get("out_zeroed", False),
    )


register(
    Backend(
        name=NAME,
        priority=PRIORITY,
        implementations={
            "grouped_gemm": grouped_gemm,
            "grouped_gemm_swiglu": grouped_gemm_swiglu,
            "grouped_gemm_finalize": grouped_gemm_finalize,
            "fused_moe": functools.partial(moe_pipeline.fused_moe, backend=NAME),
        },
        can_implement=can_implement,
        devices=("cuda",),
    )
)
