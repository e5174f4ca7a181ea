#!/usr/bin/env bash
# Multi-GPU CI on one host (e.g. 2 H100s): the GPU test tier with as many xdist workers as the
# cores and memory carry, spread over the GPUs (tests/conftest.py pins worker gwK to GPU
# K mod n, so W workers put W/n on each GPU), longest tests first from a cost table; then the
# gate split into shards balanced by measured case cost (`--shard-costs`), each pinned with
# CUDA_VISIBLE_DEVICES, merged into one verdict (`blockattn merge` refuses a missing or
# unfinished shard, or shards split by another table). Evidence that every GPU did work lands
# in OUT:
#   workers/<gwN>.json  GPU uuid, tests run, per-test seconds and CUDA memory per worker;
#   test_costs.json     this run's per-test seconds: the next run's TEST_COSTS;
#   gpu_samples.csv     nvidia-smi utilisation/memory of every GPU every 0.5 s;
#   gpu_work.md         the summary of both (ci/gpu_work_summary.py);
#   timing.md           seconds per phase, workers and shards.
# Usage: bash ci/multi_gpu.sh OUT [extra pytest args...]; exits non-zero if anything failed.
# Knobs (environment): WORKERS (default: ci/xdist_plan.py workers), TEST_COSTS (a cost table,
# default ci/baselines/test_costs_gpu.json where it exists), GATE_SHARDS (default 2 per GPU),
# SHARD_COSTS (default: the baseline report's per-case seconds), SEED (the gate's fuzz seed,
# one for all shards; default drawn here and printed in timing.md), TOL, BASELINE.
set -uo pipefail
OUT=${1:?usage: ci/multi_gpu.sh OUT [pytest args...]}
shift
TOL=${TOL:-v7}
BASELINE=${BASELINE:-ci/baselines/h100/report.json}
N=$(nvidia-smi -L | grep -c '^GPU ')
WORKERS=${WORKERS:-$(python3 ci/xdist_plan.py workers --gpus "$N")}
GATE_SHARDS=${GATE_SHARDS:-$((2 * N))}
SHARD_COSTS=${SHARD_COSTS:-$BASELINE}
TEST_COSTS=${TEST_COSTS:-ci/baselines/test_costs_gpu.json}
# One fuzz seed for every shard: a gate draws its own otherwise, and shards of different plans
# neither partition one plan nor merge (merge refuses shards run with other options).
SEED=${SEED:-$(python3 -c 'import secrets; print(secrets.randbelow(2**31))')}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT/workers"
nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader > "$OUT/gpus.csv"
nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader \
    -lms 500 > "$OUT/gpu_samples.csv" &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT
XDIST=()
if python3 -c "import inspect, sys, xdist.plugin as p; sys.exit('maxschedchunk' not in inspect.getsource(p))"; then
  XDIST=(--maxschedchunk 1)  # collection order (load): one test a send; with a table conftest runs loadgroup
fi
ORDER=(env BLOCKATTN_TEST_COSTS=)  # empty: collection order (tests/conftest.py)
ORDER_DESC="collection order (no cost table at $TEST_COSTS)"
if [ -f "$TEST_COSTS" ]; then
  ORDER=(env BLOCKATTN_TEST_COSTS="$TEST_COSTS")
  ORDER_DESC="longest first by $TEST_COSTS"
fi
rc=0
t0=$(date +%s)
"${ORDER[@]}" BLOCKATTN_WORKER_LOG="$OUT/workers" python3 -m pytest -n "$WORKERS" "${XDIST[@]}" \
    -m "not slow" -p no:cacheprovider "$@" > "$OUT/pytest.log" 2>&1 || rc=1
t1=$(date +%s)
tail -n 3 "$OUT/pytest.log"
python3 ci/xdist_plan.py costs "$OUT/workers" "$OUT/test_costs.json" || true
pids=()
for i in $(seq 1 "$GATE_SHARDS"); do
  CUDA_VISIBLE_DEVICES=$(((i - 1) % N)) python3 -m blockattn gate --tolerances "$TOL" \
      --seed "$SEED" --shard "$i/$GATE_SHARDS" --shard-costs "$SHARD_COSTS" --out "$OUT/shard-$i" \
      --no-progress > "$OUT/shard-$i.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || rc=1; done
t2=$(date +%s)
shards=()
for i in $(seq 1 "$GATE_SHARDS"); do shards+=("$OUT/shard-$i"); done
python3 -m blockattn merge "${shards[@]}" --out "$OUT/merged" || rc=1
python3 -m blockattn gate --report "$OUT/merged" --tolerances "$TOL" --baseline "$BASELINE" \
    > "$OUT/gate_merged.md" 2>&1 || rc=1
t3=$(date +%s)
head -n 8 "$OUT/gate_merged.md"
kill $SMI 2>/dev/null
{
  echo "## Multi-GPU CI timing ($N GPUs, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1))"
  echo
  echo "| phase | configuration | s |"
  echo "|---|---|---:|"
  echo "| GPU test tier | pytest -n $WORKERS ${XDIST[*]} ($((WORKERS / N)) a GPU), $ORDER_DESC | $((t1 - t0)) |"
  echo "| gate | $GATE_SHARDS shards balanced by $SHARD_COSTS, $((GATE_SHARDS / N)) a GPU, fuzz seed $SEED | $((t2 - t1)) |"
  echo "| merge + gate --report | against $BASELINE | $((t3 - t2)) |"
} > "$OUT/timing.md"
cat "$OUT/timing.md"
python3 ci/gpu_work_summary.py "$OUT" | tee "$OUT/gpu_work.md" || rc=1
exit $rc
