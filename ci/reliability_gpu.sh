#!/usr/bin/env bash
# GPU reliability items of issue 7 in one call: GPU tests (determinism x100, > 2^31 elements,
# real CUDA OOM, non-finite containment on the compiled kernels), then compute-sanitizer.
#   bash ci/reliability_gpu.sh [OUT_DIR]    (default reports/reliability-gpu)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-reports/reliability-gpu}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
t0=$SECONDS
timeout "${PYTEST_TIMEOUT_S:-200}" python3 -m pytest tests/reliability -q -rs -p no:cacheprovider \
  --durations=8 2>&1 | tee "$OUT/pytest.txt"
py_rc=${PIPESTATUS[0]}
echo "pytest rc=$py_rc in $((SECONDS - t0)) s" | tee -a "$OUT/pytest.txt"
SANITIZE_TIMEOUT_S=${SANITIZE_TIMEOUT_S:-120} bash ci/sanitize.sh "$OUT/sanitize"
san_rc=$?
echo "reliability_gpu: pytest rc=$py_rc, sanitize rc=$san_rc, total $SECONDS s"
[[ $py_rc -eq 0 && $san_rc -eq 0 ]]
