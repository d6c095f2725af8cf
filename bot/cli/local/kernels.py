"""`bot kernels build`: compile every CuTe kernel of the dispatcher's list ahead of time.

Compiles with placeholder pointers and a fake stream (no GPU needed, nothing queries the
device), checks that each kernel's PTX holds its MMA (`wgmma.mma_async` or `mma.sync` on sm_90a,
tcgen05's block-scaled `kind::mxf4nvf4` MMA on sm_100a) and, where ptxas is found, that ptxas does
not serialise it; prints one line per kernel and tactic and a count, and exits 1 if anything
failed. cutlass is imported only inside the command.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace

import click

from stagebot.kernels.cute.tactics import SM100_TACTICS, TACTICS, Tactic
from stagebot.stages.errors import StagebotError

# The tactic list built for each arch: Hopper's dispatcher list; Blackwell's block-scaled one
# (compiled, not run on hardware: no B200 here).
ARCH_TACTICS = {"sm_90a": TACTICS, "sm_100a": SM100_TACTICS}
ARCHES = tuple(ARCH_TACTICS)
# The dispatcher's kernels and the compile-time constants each is built with: the MoE shapes'
# GEMM1 (N = 2 x 2048, K = 7168) for the plain and SwiGLU kernels, GEMM2 (N = 7168, K = 2048,
# top-8) for finalize and the fp32 rows of the deterministic finalize. All but the plain one are
# built with tile_idx_to_mn_limit (which the sparse_rows tactic reads), as fused_moe calls them.
BUILD_CONSTANTS = {
    "grouped_gemm": {"n": 4096, "k": 7168, "mn_limit": False, "top_k": 1},
    "grouped_gemm_f32_rows": {"n": 7168, "k": 2048, "mn_limit": True, "top_k": 1},
    "grouped_gemm_swiglu": {"n": 4096, "k": 7168, "mn_limit": True, "top_k": 1},
    "grouped_gemm_finalize": {"n": 7168, "k": 2048, "mn_limit": True, "top_k": 8},
}
KERNELS = tuple(BUILD_CONSTANTS)
NUM_EXPERTS, TILE_SIZE = 8, 128
# The MMA instruction each kernel's PTX must hold: WGMMA, or mma.sync for the decode kernel
# (the swap_ab tactics without an fp16 operand), or on sm_100a tcgen05's block-scaled MMA on
# the packed NVFP4 operands (e2m1 with e4m3 scales per 16 values: kind::mxf4nvf4, 4X).
WGMMA, MMA_SYNC = "wgmma.mma_async", "mma.sync.aligned.m16n8k16"
BLOCK_SCALED_MMA = "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::4X"
# A ring-buffer wait whose phase is a literal: the pipeline state was not carried across loop
# turns (CuTe DSL carries only what the loop body itself visibly updates), so the kernel hangs
# once the ring wraps. Every wait of a working kernel takes its phase from a register.
CONSTANT_PHASE_WAIT = re.compile(r"mbarrier\.try_wait\.parity\S*\s+\S+\s+\[[^\]]+\],\s*\d+\s*,")
_TACTIC_RE = re.compile(r"^(\d+)x(\d+):(\d+)x(\d+):(\d+)$")
# ptxas's warnings that a kernel compiled but runs far below its design: setmaxnreg ignored
# (C7508), WGMMAs serialised for lack of registers (C7512: the 256-token RS kernel in a 288-
# thread CTA) or around register writes in their wait window (C7513).
PTXAS_SLOW = re.compile(r"\((C7508|C7512|C7513)\)")
_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(r"(\d+) bytes spill stores")


class MissingKernelTools(StagebotError):
    """This environment cannot compile kernels: nothing is wrong with them (exit 3)."""

    exit_code = 3


def parse_tactic(text: str) -> Tactic:
    """'128x256:1x1:4' -> Tactic(tile_mn=(128, 256), cluster_mn=(1, 1), stages=4)."""
    match = _TACTIC_RE.match(text)
    if not match:
        raise click.BadParameter(f"{text!r} is not TILE_MxTILE_N:CLUSTER_MxCLUSTER_N:STAGES")
    tm, tn, cm, cn, stages = map(int, match.groups())
    return Tactic((tm, tn), (cm, cn), stages)


def build_one(kernel: str, tactic: Tactic, arch: str) -> tuple[bool, str]:
    """(ok, detail) for one kernel and tactic."""
    from stagebot.kernels.cute.compile import (
        DTYPES,
        KERNEL_EPILOGUE,
        CompileKey,
        compile_kernel,
        kernel_class,
    )

    c = BUILD_CONSTANTS[kernel]
    ok, why = kernel_class(tactic).can_implement(
        tactic, c["n"], c["k"], TILE_SIZE, KERNEL_EPILOGUE[kernel]
    )
    if not ok:
        return False, f"cannot implement: {why}"
    key = CompileKey(
        kernel,
        tactic,
        DTYPES[kernel],
        c["n"],
        c["k"],
        NUM_EXPERTS,
        TILE_SIZE,
        arch,
        mn_limit=c["mn_limit"],
        top_k=c["top_k"],
    )
    started = time.monotonic()
    try:
        compiled = compile_kernel(key, keep_ptx=True)
    except Exception as error:  # a compiler failure is a build result, reported per tactic
        return False, f"compile failed: {type(error).__name__}: {str(error).splitlines()[0]}"
    ptx = compiled.__ptx__ or ""
    required = MMA_SYNC if tactic.swap_ab and not tactic.fp16_operand else WGMMA
    if tactic.blockscaled:
        required = BLOCK_SCALED_MMA
    count = ptx.count(required)
    if not count:
        return False, f"PTX has no {required}"
    if CONSTANT_PHASE_WAIT.search(ptx):
        return False, (
            "an mbarrier wait has a constant phase: the pipeline state is not advanced in the "
            "loop body, so the kernel would hang once its ring wraps"
        )
    ok, resources = ptxas_report(ptx, arch)
    if not ok:
        return False, resources
    return True, f"{required} x{count}, {resources}, {time.monotonic() - started:.1f} s"


def ptxas_path() -> str | None:
    """ptxas on the PATH, else the one Triton (of the [kernels] extra) ships."""
    import importlib.util
    import shutil
    from pathlib import Path

    found = shutil.which("ptxas")
    spec = None if found else importlib.util.find_spec("triton")
    if spec and spec.submodule_search_locations:
        bundled = Path(spec.submodule_search_locations[0], "backends", "nvidia", "bin", "ptxas")
        found = str(bundled) if bundled.exists() else None
    return found


def ptxas_report(ptx: str, arch: str) -> tuple[bool, str]:
    """(ok, registers and spills) from assembling ``ptx`` with ``ptxas -v``; not ok with the
    warning when ptxas says the kernel will run serialised (PTXAS_SLOW) or refuses the PTX."""
    import subprocess
    import tempfile
    from pathlib import Path

    ptxas = ptxas_path()
    if ptxas is None:
        return True, "no ptxas: registers not checked"
    with tempfile.TemporaryDirectory(prefix="stagebot-ptxas-") as scratch:
        source = Path(scratch, "kernel.ptx")
        source.write_text(ptx.replace("\0", ""), encoding="utf-8")
        done = subprocess.run(
            [ptxas, f"-arch={arch}", "-v", str(source), "-o", str(Path(scratch, "kernel.cubin"))],
            capture_output=True,
            text=True,
            check=False,
        )
    slow = PTXAS_SLOW.search(done.stderr)
    if done.returncode or slow:
        line = next(
            (x for x in done.stderr.splitlines() if slow and slow.group(1) in x),
            done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output",
        )
        return False, f"ptxas: {line.split(' for the function')[0].strip()}"
    used = _PTXAS_USED.search(done.stderr)
    spills = _PTXAS_SPILLS.search(done.stderr)
    return True, (
        f"{used.group(1) if used else '?'} registers, "
        f"{spills.group(1) if spills else '?'} B spilled"
    )


@click.group("kernels")
def kernels() -> None:
    """CuTe DSL kernels: ahead-of-time build checks."""


@kernels.command("build")
@click.option("--arch", type=click.Choice(ARCHES), default="sm_90a", show_default=True)
@click.option("--all-tactics", is_flag=True, help="Every tactic, not only the first per kernel.")
@click.option(
    "--tactic",
    "tactics",
    multiple=True,
    metavar="MxN:CMxCN:STAGES",
    help="Build these tactics instead of the dispatcher's list (repeatable).",
)
def build(arch: str, all_tactics: bool, tactics: tuple[str, ...]) -> None:
    """Compile every kernel in ARCH's tactic list with fake tensors (sm_100a: the
    block-scaled list, compiled here and not run on hardware)."""
    try:
        import cutlass  # noqa: F401
    except ImportError as error:
        raise MissingKernelTools(
            f"environment: CuTe DSL (nvidia-cutlass-dsl) is not importable ({error}); install "
            "the [kernels] extra: pip install 'stagebot[kernels]' (from a checkout: "
            "pip install -e '.[kernels]')"
        ) from None
    listed = ARCH_TACTICS[arch]
    blockscaled = arch == "sm_100a"
    chosen = [replace(parse_tactic(t), blockscaled=blockscaled) for t in tactics] or list(
        listed if all_tactics else listed[:1]
    )
    failures = 0
    built = 0
    for kernel in KERNELS:
        for tactic in chosen:
            ok, detail = build_one(kernel, tactic, arch)
            built += ok
            failures += not ok
            click.echo(f"{'ok  ' if ok else 'FAIL'} {kernel} {tactic} {arch}: {detail}")
    click.echo(f"compiled {built} of {built + failures} (kernel, tactic) builds for {arch}")
    if failures:
        raise click.ClickException(f"{failures} of {built + failures} builds failed")


@kernels.command("record")
@click.option("--check", is_flag=True, help="Fail if the committed file is stale; write nothing.")
def record(check: bool) -> None:
    """Write every NVFP4 suite case's cute compile keys (the suite's cute_kernels.json).

    Computed without a GPU from the case list, the GEMMs each test calls and the tactic each
    case is pinned to; a fresh machine's stage compiles them while its first cases run."""
    from stagebot.harness.suites.nvfp4_moe import kernel_plan

    path = kernel_plan.PLAN_FILE
    try:
        current = kernel_plan.compute()
    except kernel_plan.PlanError as error:
        raise click.ClickException(str(error)) from error
    committed = path.read_text(encoding="utf-8") if path.exists() else ""
    problem = kernel_plan.stale(committed, current)
    if check and problem:
        raise click.ClickException(problem)
    if problem:
        path.write_text(current, encoding="utf-8")
    state = "rewritten" if problem and not check else "current"
    click.echo(f"{path}: {len(kernel_plan.load(current))} cases, {state}")
