#!/usr/bin/env bash
# Issue 42's GPU-only evidence in one call (H100 or H200): every log under OUT_DIR.
#   bash ci/probes_gpu.sh OUT_DIR
# 1. kernel paths: each BLOCKATTN_KERNEL_PATH x row-tile class (16/32/33/64/128) x dtype x head
#    dim x plain/rotary inside the bound or a named refusal (tests/kernels/test_kernel_paths_tiles.py)
# 2. the contract battery on blockattn (default path and prefer-hopper / prefer-gluon), fa2, fa4
# 3. prefer-hopper gate (the OutOfResources of gpu-block-size-128-bf16-d128 before the fix)
# 4. FA2 false alarms with baselines judged: 20 seeds x every distribution
# 5. the contract catalog's mutants (judge, TMA head stride, FA2/FA4 cut at 64) on the GPU
# Each step's exit status and wall time go to OUT_DIR/summary.txt; the script exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: bash ci/probes_gpu.sh OUT_DIR}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
git rev-parse HEAD | tee "$OUT/commit.txt"
fails=0
step() {  # step NAME TIMEOUT_S CMD...
  local name=$1 t=$2; shift 2
  local t0=$SECONDS
  timeout "$t" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0)) s: $*" | tee -a "$OUT/summary.txt"
  [[ $rc -eq 0 ]] || fails=$((fails + 1))
}
step paths 1800 python3 -m pytest -q -rs -p no:cacheprovider --durations=10 \
  tests/kernels/test_kernel_paths_tiles.py
step battery-default 600 python3 -m blockattn contract --provider blockattn --tolerances v5 \
  --out "$OUT/battery-default"
for path in prefer-hopper prefer-gluon portable; do
  step "battery-$path" 600 env BLOCKATTN_KERNEL_PATH=$path python3 -m blockattn contract \
    --provider blockattn --tolerances v5 --out "$OUT/battery-$path"
done
step battery-fa2 600 python3 -m blockattn contract --provider fa2 --tolerances v5 \
  --out "$OUT/battery-fa2"
step battery-fa4 600 python3 -m blockattn contract --provider fa4 --tolerances v5 \
  --out "$OUT/battery-fa4"
step gate-prefer-hopper 1800 env BLOCKATTN_KERNEL_PATH=prefer-hopper python3 -m blockattn gate \
  --tolerances v5 --no-progress --out "$OUT/gate-prefer-hopper"
step gate-default 1800 python3 -m blockattn gate --tolerances v5 --no-progress \
  --out "$OUT/gate-default"
step false-alarms-fa2 3600 python3 -m blockattn false-alarms --seeds 20 --every-distribution \
  --providers blockattn,fa2 --tolerances v5 --no-progress --out "$OUT/false-alarms"
step mutants-contract 3600 python3 -m blockattn mutants --group contract --tolerances v5 \
  --out "$OUT/mutants-contract"
step mutants-suite 3600 python3 -m blockattn mutants --group suite --tolerances v5 \
  --out "$OUT/mutants-suite"
echo "probes_gpu: $fails step(s) failed, total $SECONDS s" | tee -a "$OUT/summary.txt"
[[ $fails -eq 0 ]]
