#!/usr/bin/env bash
# One device call for the kernels' figures, each step under its own time limit (the call has 10
# minutes): the whole-layer table (bench_moe --layer), the per-shape table (fused rows beside the
# peer GEMM alone and with the op it replaces; the T8192 rows), then gpu_check's full run (every
# tactic's NaN-poisoning and exiting-tile checks, the finalize's on two routings with their
# negative controls, both as the op runs alone and as fused_moe runs it, its output zeroed
# aside, and the diagnostic builds, the finalize's no_unrouted / no_adds among them). The steps share the kernel cache, so the later ones load what the first compiled.
# Usage, from the checkout on the GPU machine, after `source .whl/bootstrap.sh`:
#   bash kernels/cute/bench_all.sh OUT_FOLDER [SECONDS_LAYER SECONDS_SHAPES SECONDS_CHECK]
# OUT_FOLDER gets layer.log, shapes.log, check.log, their JSON under layer/, shapes/ and check/,
# and rc.txt; the summaries are printed last.
set -uo pipefail
out=$1
limits=("${2:-120}" "${3:-170}" "${4:-270}")
mkdir -p "$out"
export PYTHONUNBUFFERED=1
step() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" python3 -m "$@" --out "$out/$name" >"$out/$name.log" 2>&1
  echo "$name rc=$? (limit ${limit}s)" >>"$out/rc.txt"
}
step layer "${limits[0]}" stagebot.kernels.cute.bench_moe --layer
step shapes "${limits[1]}" stagebot.kernels.cute.bench_moe
step check "${limits[2]}" stagebot.kernels.cute.gpu_check
for saved in "$out/shapes/bench_moe.json" "$out/layer/bench_layer.json"; do
  [ -f "$saved" ] && python3 -m stagebot.kernels.cute.bench_moe --summary "$saved"
done
sed -n '/== correctness/,$p' "$out/check.log"
cat "$out/rc.txt"
