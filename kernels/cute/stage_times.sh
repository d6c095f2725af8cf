#!/usr/bin/env bash
# Cold and warm times of the DGX_H200-PyTorch stages on the GPU machine (NOTES.md's tables).
# Usage, from the checkout, after `source .whl/bootstrap.sh`:
#   bash kernels/cute/stage_times.sh OUT_FOLDER [STAGE ...]
# (OUT_FOLDER gets table.txt and logs.tgz, rewritten after each run: two files, whatever happens.)
# For each stage: a cold run (an empty kernel cache folder and an empty Triton cache, as on a
# fresh machine: the warm step compiles the committed plan's kernels while the cases run),
# then a warm run on the same folders. Each run has its own ledger (a ledger reuses the tests
# that passed). Prints one line per run; the logs go under OUT_FOLDER.
# PROFILE=1: each `bot run` runs under cProfile (its rc then reads 0), and OUT_FOLDER/profile.txt
# gets where each run's time went (stagebot.kernels.cute.stage_profile: the stagebot functions,
# the subprocess waits, pytest's session and its slowest tests).
set -uo pipefail
out=$1
shift
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(DGX_H200-PyTorch-1 DGX_H200-PyTorch-2)
logs=$(mktemp -d)
mkdir -p "$out"
table="$out/table.txt"
printf '%-20s %-5s %6s %4s  %s\n' stage run s rc "pytest's last line | warm | compiled/loaded | plan" >"$table"
for stage in "${stages[@]}"; do
  scratch=$(mktemp -d)
  for run in cold warm; do
    tag="$stage-$run"
    runner=(bot)
    [ "${PROFILE:-0}" = 1 ] && runner=(python3 -m cProfile -o "$logs/$tag.prof" "$(command -v bot)")
    start=$(date +%s%N)
    STAGEBOT_CUTE_CACHE_DIR="$scratch/cute" TRITON_CACHE_DIR="$scratch/triton" \
      timeout 170 "${runner[@]}" run --ledger "$scratch/$run.sqlite" --out "$scratch/$run" --json \
      "/bot run --stage-list \"$stage\" --disable-fail-fast" >"$logs/$tag.json" 2>"$logs/$tag.err"
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    log=$(find "$scratch/$run" -name log.txt | head -1)
    [ -n "$log" ] && cp "$log" "$logs/$tag.log"
    summary=$(grep -hE '(passed|failed|error).* in [0-9.]+s' "$logs/$tag.log" 2>/dev/null | tail -1)
    lines=$(grep -h '^\[nvfp4_moe\] c' "$logs/$tag.log" 2>/dev/null | cut -c13- | paste -sd '|')
    printf '%-20s %-5s %4d.%01d %4s  %s | %s\n' "$stage" "$run" $((ms / 1000)) $((ms % 1000 / 100)) \
      "$rc" "$summary" "$lines" >>"$table"
    if [ "${PROFILE:-0}" = 1 ]; then
      echo "== $tag ($((ms / 1000)) s)" >>"$out/profile.txt"
      python3 -m stagebot.kernels.cute.stage_profile "$logs/$tag.prof" "$scratch/$run" \
        >>"$out/profile.txt" 2>&1
    fi
    tar czf "$out/logs.tgz" -C "$logs" .
  done
  rm -rf "$scratch"
done
cat "$table"
