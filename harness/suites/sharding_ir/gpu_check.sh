#!/usr/bin/env bash
# The sharding-IR suite on a GPU machine: every family on every dist config (NCCL in bf16 where
# the host has a GPU per rank, else gloo on the CPU in fp32), then the per-family, per-config wall
# times. Run from the repository root:
#   bash harness/suites/sharding_ir/gpu_check.sh [EXTRA PYTEST ARGS]
# Logs go to $OUT (or out/sharding_ir): pytest.log, gpu.txt; BUDGET_S bounds the pytest run.
set -uo pipefail
out="${OUT:-out/sharding_ir}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'GPUs', torch.cuda.device_count())" | tee -a "$out/gpu.txt"
start=$(date +%s)
PYTHONUNBUFFERED=1 timeout "${BUDGET_S:-480}" python3 -m pytest -s -q -p no:cacheprovider \
    harness/suites/sharding_ir/test_equivalence.py harness/suites/sharding_ir/test_families.py \
    --sharding-ir-model-id all --sharding-ir-dist-config tp-only \
    --sharding-ir-dist-config ep-only --sharding-ir-dist-config tep "$@" 2>&1 | tee "$out/pytest.log" |
    grep -E '^(FAILED|ERROR)|[0-9]+ (passed|failed)'
rc=${PIPESTATUS[0]}
echo "pytest exit $rc after $(($(date +%s) - start)) s; per case (family, config: ranks, backend, wall):"
grep -o '\[sharding_ir\].*' "$out/pytest.log"
exit "$rc"
