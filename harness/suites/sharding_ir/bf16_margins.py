"""The bf16 margins of every family's numeric checks on one dist config, on the CPU (gloo in bf16,
as NCCL runs the checks): per family the clean sharded forward's relative RMSE against the
unsharded one, and each numeric control's (which must fail), beside the tolerance.

    python -m stagebot.harness.suites.sharding_ir.bf16_margins [--config tep] [MODEL_ID ...]

The clean margin is tolerance / clean error (how far the pass is from failing); a control's is its
error / tolerance (how far it is from passing). Both should stay well above 1.
"""

from __future__ import annotations

import argparse
import re
import time

NUMERIC_CONTROLS = (
    "control-no-collectives",
    "control-avg-as-sum-numeric",
    "control-follower-shifted-numeric",
    "control-routing-mask-removed",
)
_RMSE = re.compile(r"rel RMSE ([0-9.e+-]+) \(tolerance ([0-9.e+-]+)")


def _rmse(results) -> tuple[float, float]:
    """The largest relative RMSE over the ranks, and the tolerance."""
    found = [_RMSE.search(r.detail) for r in results]
    return max(float(m[1]) for m in found), float(found[0][2])


def margins(model_id: str, config: str) -> str:
    from stagebot.harness.suites.sharding_ir.case import run_case
    from stagebot.harness.suites.sharding_ir.registry import REGISTRY

    start = time.perf_counter()
    report = run_case(REGISTRY[model_id], config, gloo_dtype="bf16")
    clean, tolerance = _rmse(report["default/numeric"])
    cells = [f"clean {clean:.4f} (margin {tolerance / clean:.1f}x)"]
    for control in NUMERIC_CONTROLS:
        key = f"default/{control}"
        if key in report:
            found = [_RMSE.search(r.detail) for r in report[key]]
            error = min(float(m[1]) for m in found)
            cells.append(f"{control} {error:.4f} ({error / tolerance:.1f}x)")
    seconds = time.perf_counter() - start
    return f"{model_id} [{config}, tol {tolerance:g}, {seconds:.0f} s]: " + "; ".join(cells)


def main() -> None:
    from stagebot.harness.suites.sharding_ir.registry import REGISTRY

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_ids", nargs="*", help="registered ids (default: every family)")
    parser.add_argument("--config", default="tep")
    args = parser.parse_args()
    for model_id in args.model_ids or list(REGISTRY):
        print(margins(model_id, args.config), flush=True)


if __name__ == "__main__":
    main()
