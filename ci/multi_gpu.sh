#!/usr/bin/env bash
# Multi-GPU CI on one host (e.g. 2 H200s): the GPU test tier with one xdist worker per GPU
# (tests/conftest.py pins worker gwN to GPU N mod n), then the gate split into one --shard per
# GPU, each pinned with CUDA_VISIBLE_DEVICES, merged into one verdict (`blockattn merge` refuses a
# missing or unfinished shard). Evidence that every GPU did work lands in OUT:
#   workers/<gwN>.json  GPU uuid, tests run and CUDA memory per pytest worker;
#   gpu_samples.csv     nvidia-smi utilisation/memory of every GPU every 0.5 s;
#   gpu_work.md         the summary of both (ci/gpu_work_summary.py).
# Usage: bash ci/multi_gpu.sh OUT [extra pytest args...]; exits non-zero if anything failed.
set -uo pipefail
OUT=${1:?usage: ci/multi_gpu.sh OUT [pytest args...]}
shift
TOL=${TOL:-v5}
BASELINE=${BASELINE:-ci/baselines/h100/report.json}
N=$(nvidia-smi -L | grep -c '^GPU ')
mkdir -p "$OUT/workers"
nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader > "$OUT/gpus.csv"
nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader \
    -lms 500 > "$OUT/gpu_samples.csv" &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT
rc=0
BLOCKATTN_WORKER_LOG="$OUT/workers" python3 -m pytest -n "$N" -m "not slow" -p no:cacheprovider \
    "$@" > "$OUT/pytest.log" 2>&1 || rc=1
tail -n 3 "$OUT/pytest.log"
pids=()
for i in $(seq 1 "$N"); do
  CUDA_VISIBLE_DEVICES=$((i - 1)) python3 -m blockattn gate --tolerances "$TOL" \
      --shard "$i/$N" --out "$OUT/shard-$i" --no-progress > "$OUT/shard-$i.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || rc=1; done
shards=()
for i in $(seq 1 "$N"); do shards+=("$OUT/shard-$i"); done
python3 -m blockattn merge "${shards[@]}" --out "$OUT/merged" || rc=1
python3 -m blockattn gate --report "$OUT/merged" --tolerances "$TOL" --baseline "$BASELINE" \
    > "$OUT/gate_merged.md" 2>&1 || rc=1
head -n 8 "$OUT/gate_merged.md"
kill $SMI 2>/dev/null
python3 ci/gpu_work_summary.py "$OUT" | tee "$OUT/gpu_work.md" || rc=1
exit $rc
