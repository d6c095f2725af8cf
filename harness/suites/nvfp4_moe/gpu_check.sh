#!/usr/bin/env bash
# The NVFP4 MoE suite on a GPU machine: the full GPU matrix with one backend forced (reference
# unless MOE_BACKEND says otherwise), and the cpu cases unless that backend runs on CUDA only
# (cute). Run from the repository root:
#   bash harness/suites/nvfp4_moe/gpu_check.sh [EXTRA PYTEST ARGS]
# Logs go to $OUT (or out/nvfp4_moe): pytest.log, junit.xml, gpu.txt. Prints a summary table last.
set -uo pipefail
out="${OUT:-out/nvfp4_moe}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" | tee -a "$out/gpu.txt"
start=$(date +%s)
PYTHONUNBUFFERED=1 timeout "${BUDGET_S:-480}" python3 -m pytest harness/suites/nvfp4_moe \
    --moe-backend "${MOE_BACKEND:-reference}" -q -p no:cacheprovider \
    --junitxml="$out/junit.xml" --durations=10 "$@" 2>&1 | tee "$out/pytest.log"
rc=${PIPESTATUS[0]}
wall=$(($(date +%s) - start))
[ -f "$out/junit.xml" ] && python3 - "$out/junit.xml" <<'PY'
import collections, re, sys, xml.etree.ElementTree as ET
rows = collections.defaultdict(lambda: collections.Counter())
for case in ET.parse(sys.argv[1]).iter("testcase"):
    name = case.get("name")
    test = name.split("[")[0]
    device = "cuda" if "[cuda-" in name or "-cuda]" in name else "cpu"
    outcome = "failed" if case.find("failure") is not None or case.find("error") is not None else (
        "skipped" if case.find("skipped") is not None else "passed")
    rows[(test, device)][outcome] += 1
    rows[(test, device)]["seconds"] += float(case.get("time", 0))
print(f"{'test':<62}{'device':>7}{'passed':>8}{'failed':>8}{'skipped':>8}{'seconds':>9}")
for (test, device), c in sorted(rows.items()):
    print(f"{test:<62}{device:>7}{c['passed']:>8}{c['failed']:>8}{c['skipped']:>8}{c['seconds']:>9.1f}")
PY
echo "suite wall time: ${wall} s; pytest exit code ${rc}"
exit "$rc"
