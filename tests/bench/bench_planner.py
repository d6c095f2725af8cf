"""Benchmark: `bot dry-run` start-up as a fresh process, and planning time against catalog size.

Run from the repository root:  python tests/bench/bench_planner.py
Prints medians; planning should grow linearly with the number of stages (constant µs/stage), and
parsing with the comment's size (GitHub's limit is 64 KB; a 1 MB comment parses in about a
second).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from stagebot.bot.comments.grammar import parse_comment
from stagebot.stages.catalog import load_catalog
from stagebot.stages.errors import CommandError
from stagebot.stages.planner import plan_run

GPUS = ("A10", "A30", "H100_PCIe", "DGX_H200")
BACKENDS = ("PyTorch", "CPP", "TensorRT", "Triton", "AutoDeploy")


def median_seconds(action, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def generated_catalog(folder: Path, stages: int) -> Path:
    """A catalog of ``stages`` single-shard families over a mix of GPUs, backends and path rules."""
    lines = ["gpu_types:"]
    lines += [
        f"  {gpu}: {{arch: sm_90a, device_names: ['{gpu}'], runner_labels: [r]}}" for gpu in GPUS
    ]
    lines.append("families:")
    for i in range(stages):
        gpu, backend = GPUS[i % len(GPUS)], BACKENDS[i % len(BACKENDS)]
        gpus = "-4_GPUs" if i % 7 == 0 else ""
        rule = (
            f"run_if_changed: ['area{i % 50}/**']"
            if i % 3 == 0
            else "skip_if_only_changed: ['**/*.md']"
        )
        lines.append(
            f"  - {{name: {gpu}{gpus}-{backend}-T{i}, kind: test, timeout_minutes: 30, "
            f"suites: [{{path: suites/s{i % 20}}}], {rule}}}"
        )
    path = folder / f"catalog-{stages}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


PARSE_CASES = {  # the shapes that made the old `/bot` line regex quadratic, and plain prose
    "blanks inside the /bot line": lambda n: "/bot run" + " " * n + "--disable-fail-fast",
    "a long unknown flag": lambda n: "/bot run --" + "x" * n,
    "prose lines, then /bot run": lambda n: "looks good to me\n" * (n // 17) + "/bot run",
}


def parse_timings() -> None:
    """`parse_comment` time by comment size; an error is a parse too (it ends the same way)."""
    print(f"\n{'comment':<30} {'64 KB (ms)':>11} {'1 MB (ms)':>10}")
    for name, make in PARSE_CASES.items():
        cells = []
        for size in (64 * 1024, 1024 * 1024):
            text = make(size)

            def parse(text=text):
                try:
                    parse_comment(text)
                except CommandError:
                    pass

            cells.append(median_seconds(parse, 3) * 1000)
        print(f"{name:<30} {cells[0]:>11.1f} {cells[1]:>10.1f}")


def main() -> None:
    bot = shutil.which("bot") or sys.exit("install the project first: pip install -e .")
    comment = '/bot run --extra-stage "DGX_B200-4_GPUs-AutoDeploy-1" --disable-fail-fast'
    subprocess.run(
        [bot, "dry-run", comment], check=True, capture_output=True
    )  # warm the disk cache
    startup = median_seconds(
        lambda: subprocess.run([bot, "dry-run", comment], check=True, capture_output=True), 10
    )
    print(
        f"bot dry-run, fresh process, default catalog: median of 10 = {startup * 1000:.0f} ms "
        "(target < 250 ms)"
    )
    command = parse_comment("/bot run --add-multi-gpu-test --disable-fail-fast")
    changed = [f"area{i}/x.py" for i in range(0, 50, 5)] + ["src/main.py"]
    print(f"\n{'stages':>7} {'load (ms)':>10} {'plan (ms)':>10} {'plan µs/stage':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for stages in (500, 1000, 2000, 5000):
            path = generated_catalog(Path(tmp), stages)
            load = median_seconds(partial(load_catalog, path), 3)
            planning = partial(
                plan_run, command, load_catalog(path), changed_files=changed, commit="a" * 40
            )
            plan = median_seconds(planning, 5)
            per_stage = plan / stages * 1e6
            print(f"{stages:>7} {load * 1000:>10.1f} {plan * 1000:>10.1f} {per_stage:>14.1f}")
    parse_timings()


if __name__ == "__main__":
    main()
