#!/usr/bin/env bash
# compute-sanitizer memcheck + racecheck over every blockattn kernel variant (GPU only).
#
#   bash ci/sanitize.sh [OUT_DIR]      (default reports/sanitize)
#
# Writes OUT_DIR/{warm,memcheck,racecheck}.log and OUT_DIR/summary.md; exits 0 only when both
# tools report 0 errors and every variant launched. Each tool is bounded by SANITIZE_TIMEOUT_S.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-reports/sanitize}
TIMEOUT_S=${SANITIZE_TIMEOUT_S:-150}
mkdir -p "$OUT"
PY=${PYTHON:-python3}

CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}
if [[ -z "$CS" ]]; then
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer \
           /opt/nvidia/*/compute-sanitizer/compute-sanitizer; do
    [[ -x "$c" ]] && CS=$c && break
  done
fi
if [[ -z "$CS" || ! -x "$CS" ]]; then
  echo "compute-sanitizer not found (set COMPUTE_SANITIZER=/path/to/compute-sanitizer)" >&2
  exit 2
fi

# Every tensor its own cudaMalloc: with the caching allocator an out-of-bounds access that stays
# inside a cached segment is invisible to memcheck.
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
unset TRITON_INTERPRET

# 1) Compile every variant without the sanitizer: Triton's compile under it takes minutes.
#    The same env (no caching allocator) gives the same pointer alignment, so the same cache keys.
t0=$SECONDS
# Compiles are independent: 8 shards in parallel (the Triton cache tolerates concurrent writers).
NSH=8
for i in $(seq 0 $((NSH - 1))); do
  $PY ci/sanitize_kernels.py --shard "$i/$NSH" >"$OUT/warm.$i.log" 2>&1 &
done
warm_rc=0
for job in $(jobs -p); do wait "$job" || warm_rc=1; done
cat "$OUT"/warm.*.log >"$OUT/warm.log" && rm -f "$OUT"/warm.*.log
echo "warm-up rc=$warm_rc in $((SECONDS - t0)) s"

status=0
declare -A RC SECS
for tool in memcheck racecheck; do
  t0=$SECONDS
  extra=()
  [[ $tool == memcheck ]] && extra=(--leak-check no --report-api-errors no)
  timeout "$TIMEOUT_S" "$CS" --tool "$tool" --error-exitcode 3 "${extra[@]}" \
    $PY ci/sanitize_kernels.py >"$OUT/$tool.log" 2>&1
  RC[$tool]=$?
  SECS[$tool]=$((SECONDS - t0))
  echo "$tool rc=${RC[$tool]} in ${SECS[$tool]} s"
  [[ ${RC[$tool]} -ne 0 ]] && status=1
done
[[ $warm_rc -ne 0 ]] && status=1

{
  echo "# compute-sanitizer: blockattn kernels"
  echo
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "- sanitizer: $("$CS" --version 2>/dev/null | tail -1)"
  echo "- torch $($PY -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null), triton $($PY -c 'import triton; print(triton.__version__)' 2>/dev/null)"
  echo "- commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- variants launched (warm-up): $(grep -c '^ok ' "$OUT/warm.log"), rc $warm_rc"
  echo
  echo "| tool | exit | seconds | variants ok | summary |"
  echo "|---|---|---|---|---|"
  for tool in memcheck racecheck; do
    summ=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$OUT/$tool.log" | tail -1)
    echo "| $tool | ${RC[$tool]} | ${SECS[$tool]} | $(grep -c '^ok ' "$OUT/$tool.log") | ${summ:-no summary line (timeout?)} |"
  done
  echo
  echo "exit 0 and '0 errors' / '0 hazards' on both rows = clean. Logs: warm.log, memcheck.log, racecheck.log."
} >"$OUT/summary.md"
cat "$OUT/summary.md"
exit $status
