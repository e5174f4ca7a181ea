#!/usr/bin/env bash
# compute-sanitizer memcheck + racecheck over every blockattn kernel variant (GPU only).
#
#   bash ci/sanitize.sh [OUT_DIR]      (default reports/sanitize)
#
# Every variant, and each kernel the dispatcher can be forced to (sanitize_kernels.py --sweep).
# Then the sanitizer's known answers: each planted memory bug (blockattn/mutants/memory_bugs.py,
# a read past a tensor that changes no output) on a copy of the package, which memcheck must
# report. Writes OUT_DIR/{warm,memcheck,racecheck}.log, OUT_DIR/planted/NAME.log and
# OUT_DIR/summary.md; exits 0 only when memcheck reports 0 errors and racecheck no race but
# Triton's warp-specialize dispatch (ci/racecheck_triage.py) on the clean kernels, every variant
# launched with finite outputs, and memcheck caught every planted bug it could run. Each tool
# run is bounded by SANITIZE_TIMEOUT_S.
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
  $PY ci/sanitize_kernels.py --sweep --shard "$i/$NSH" >"$OUT/warm.$i.log" 2>&1 &
done
warm_rc=0
for job in $(jobs -p); do wait "$job" || warm_rc=1; done
cat "$OUT"/warm.*.log >"$OUT/warm.log" && rm -f "$OUT"/warm.*.log
echo "warm-up rc=$warm_rc in $((SECONDS - t0)) s"

status=0
declare -A RC SECS VERDICT
for tool in memcheck racecheck; do
  t0=$SECONDS
  extra=()
  [[ $tool == memcheck ]] && extra=(--leak-check no --report-api-errors no)
  timeout "$TIMEOUT_S" "$CS" --tool "$tool" --error-exitcode 3 "${extra[@]}" \
    $PY ci/sanitize_kernels.py --sweep >"$OUT/$tool.log" 2>&1
  RC[$tool]=$?
  SECS[$tool]=$((SECONDS - t0))
  echo "$tool rc=${RC[$tool]} in ${SECS[$tool]} s"
  launched=$(grep -E "^launched .*, 0 failed$" "$OUT/$tool.log")
  VERDICT[$tool]=clean
  if [[ ${RC[$tool]} -ne 0 || -z $launched ]]; then VERDICT[$tool]=FAIL; fi
  # racecheck's reports of Triton's warp-specialize dispatch (ordered by named barrier 1, see
  # ci/racecheck_triage.py) are not the kernels' races: exit 3 with only those is clean.
  if [[ $tool == racecheck && ${RC[$tool]} -eq 3 && -n $launched ]]; then
    if $PY ci/racecheck_triage.py "$OUT/racecheck.log" >"$OUT/racecheck_triage.txt"; then
      VERDICT[$tool]="clean: $(head -1 "$OUT/racecheck_triage.txt")"
    else
      VERDICT[$tool]="FAIL: $(head -1 "$OUT/racecheck_triage.txt")"
    fi
  fi
  [[ ${VERDICT[$tool]} == FAIL* ]] && status=1
done
[[ $warm_rc -ne 0 ]] && status=1

# 2) The planted memory bugs: memcheck must exit 3 (its --error-exitcode) naming an invalid read.
mkdir -p "$OUT/planted"
declare -A CAUGHT
for name in $($PY -c "from blockattn.mutants.memory_bugs import MEMORY
print(' '.join(m.name for m in MEMORY))"); do
  dir=$(mktemp -d)
  envs=$($PY ci/sanitize_kernels.py --plant "$name" "$dir" 2>"$OUT/planted/$name.log")
  prc=$?
  if [[ $prc -eq 4 ]]; then CAUGHT[$name]="not run ($(tail -1 "$OUT/planted/$name.log"))"; continue; fi
  if [[ $prc -ne 0 ]]; then CAUGHT[$name]="ERROR: could not plant"; status=1; continue; fi
  # shellcheck disable=SC2086  # envs: KEY=VALUE words
  env $envs $PY ci/sanitize_kernels.py --root "$dir" >>"$OUT/planted/$name.log" 2>&1
  # shellcheck disable=SC2086
  env $envs timeout "$TIMEOUT_S" "$CS" --tool memcheck --error-exitcode 3 --leak-check no --print-limit 10 \
    --report-api-errors no $PY ci/sanitize_kernels.py --root "$dir" >>"$OUT/planted/$name.log" 2>&1
  mrc=$?
  reads=$(grep -c "Invalid __global__ read" "$OUT/planted/$name.log")
  if [[ $mrc -eq 3 && $reads -gt 0 ]]; then
    CAUGHT[$name]="caught: memcheck exit 3, $reads invalid global reads"
  else
    CAUGHT[$name]="NOT CAUGHT: memcheck exit $mrc, $reads invalid global reads"; status=1
  fi
  echo "planted $name: ${CAUGHT[$name]}"
  rm -rf "$dir"
done
[[ ${#CAUGHT[@]} -eq 0 ]] && status=1  # no known answer ran: the sanitizer is unproven

{
  echo "# compute-sanitizer: blockattn kernels"
  echo
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "- sanitizer: $("$CS" --version 2>/dev/null | tail -1)"
  echo "- torch $($PY -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null), triton $($PY -c 'import triton; print(triton.__version__)' 2>/dev/null)"
  echo "- commit ${BLOCKATTN_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "- variants launched (warm-up): $(grep -c '^ok ' "$OUT/warm.log"), rc $warm_rc"
  echo
  echo "| tool | exit | seconds | variants ok | variants failed | summary | verdict |"
  echo "|---|---|---|---|---|---|---|"
  for tool in memcheck racecheck; do
    summ=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$OUT/$tool.log" | tail -1)
    echo "| $tool | ${RC[$tool]} | ${SECS[$tool]} | $(grep -c '^ok ' "$OUT/$tool.log") | $(grep -c '^FAIL ' "$OUT/$tool.log") | ${summ:-no summary line (timeout?)} | ${VERDICT[$tool]} |"
  done
  echo
  echo "Verdict clean on both rows = clean (racecheck: its reports of Triton's warp-specialize dispatch"
  echo "sorted out by ci/racecheck_triage.py). Logs: warm.log, memcheck.log, racecheck.log."
  echo
  echo "Planted memory bugs (blockattn/mutants/memory_bugs.py; memcheck must catch each):"
  echo
  echo "| planted bug | memcheck |"
  echo "|---|---|"
  for name in "${!CAUGHT[@]}"; do echo "| $name | ${CAUGHT[$name]} |"; done
  [[ ${#CAUGHT[@]} -eq 0 ]] && echo "| (none ran) | ERROR |"
  echo
  echo "**$([[ $status -eq 0 ]] && echo PASS || echo FAIL)** (exit $status)"
} >"$OUT/summary.md"
cat "$OUT/summary.md"
exit $status
