"""Every Triton kernel compiles for sm_90 on this machine, GPU or not.

The CPU tests run the kernels under Triton's interpreter, which accepts Python that the
compiler refuses (a list comprehension compiled in the interpreter and failed on the H200).
Triton's ahead-of-time path (ASTSource -> PTX for a GPUTarget) needs no GPU, so CI builds each
kernel with the argument types its launcher passes. A child process keeps TRITON_INTERPRET out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import extras

pytestmark = pytest.mark.slow

extras.require("triton")

# (kernel, argument types as its launcher passes them, constexprs: a str names the module's
# constant), one entry per specialisation a launch makes. PRECISE_EXP is what a compiled (not
# interpreted) module passes; nvfp4_operand's tiles pointer is `sf` when it is not LIMITED.
_OPERAND_BLOCKS = {
    "BLOCK_R": "OPERAND_BLOCK_R",
    "BLOCK_W": "OPERAND_BLOCK_W",
    "SCALE_EXP": "OPERAND_SCALE_EXP",
}
BUILDS = [
    (
        "_swiglu_quantize_kernel",
        ["*i32", "*fp32", "*u8", "*u8", "i32", "i32", "i32", "i32"],
        {"BLOCK_M": "SWIGLU_BLOCK_M", "GROUPS": 2, "PRECISE_EXP": True},
    ),
    (
        "_nvfp4_operand_kernel",
        ["*i32", "*u8", "*i32", "*u8", "i32", "i32", "i32"],
        {**_OPERAND_BLOCKS, "LIMITED": False, "REGISTER_ORDER": False},
    ),
    *(
        (
            "_nvfp4_operand_kernel",
            ["*i32", "*u8", "*i32", "*i32", "i32", "i32", "i32"],
            {**_OPERAND_BLOCKS, "LIMITED": True, "REGISTER_ORDER": order},
        )
        for order in (False, True)  # the WGMMA kernel's tokens; the RS kernel's
    ),
    (
        "_unpermute_kernel",
        ["*i16", "*i32", "*fp32", "*i16"] + ["i32"] * 7,
        {
            "TOP_K": 8,
            "BLOCK_T": "UNPERMUTE_BLOCK_T",
            "BLOCK_N": "UNPERMUTE_BLOCK_N",
            "SRC_F32": False,
        },
    ),
]

CHILD = textwrap.dedent(
    """
    import inspect, json, sys
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from stagebot.kernels import triton_elementwise as te

    name, types, constexprs = json.loads(sys.argv[1])
    fn = getattr(te, name)
    constexprs = {k: getattr(te, v) if isinstance(v, str) else v for k, v in constexprs.items()}
    params = list(inspect.signature(fn.fn).parameters)
    signature = dict(zip(params, types + ["constexpr"] * len(constexprs), strict=True))
    compiled = triton.compile(
        ASTSource(fn=fn, signature=signature, constexprs=constexprs),
        target=GPUTarget("cuda", 90, 32),
    )
    ptx = compiled.asm["ptx"]
    print(json.dumps({"ptx_lines": ptx.count(chr(10)), "sm_90": ".target sm_90" in ptx}))
    """
)


@pytest.mark.parametrize(
    ("kernel", "types", "constexprs"),
    BUILDS,
    ids=[f"{kernel}-{i}" for i, (kernel, _, _) in enumerate(BUILDS)],
)
def test_the_triton_kernel_compiles_for_sm_90(kernel, types, constexprs):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps([kernel, types, constexprs])],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    built = json.loads(done.stdout.strip().splitlines()[-1])
    assert built["sm_90"] and built["ptx_lines"] > 50, built


def test_every_triton_kernel_of_the_module_is_built():
    """A new @triton.jit kernel must be added to BUILDS."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = (
        "import json, triton; from stagebot.kernels import triton_elementwise as te; "
        "print(json.dumps(sorted(n for n, v in vars(te).items() "
        "if isinstance(v, triton.runtime.JITFunction) and n.endswith('_kernel'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == sorted({kernel for kernel, _, _ in BUILDS})
