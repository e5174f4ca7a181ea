#!/usr/bin/env bash
# Does the GPU test tier scale with GPUs? (issue 44 item 4.) Times the same pytest selection on
# one GPU of this host and on all of them, each run with its own fresh Triton and Inductor cache
# (same cache state: cold), and writes the table and its verdict (N GPUs >= 0.8 N times as fast
# as one GPU at its best -n among those timed; ci/xdist_plan.py).
#
#   bash ci/tier_scaling.sh OUT [pytest selection...]     (default selection: -m "not slow")
#
# Runs, in order, each limited to its *_MAX_S and to what is left of BUDGET_S (a run cut off
# is recorded with its exit 124 and does not count; under MIN_S left, a run is skipped):
#   1. one GPU (CUDA_VISIBLE_DEVICES=0), -n ONE_N (default 12: the best -n measured on one
#      16-core H200), collection order; its per-test seconds become the cost table;
#   2. all GPUs, -n ALL_N (default: ci/xdist_plan.py workers), longest first by run 1's table;
#   3. one GPU again at -n ONE_N2 (default: ci/xdist_plan.py workers --gpus 1), longest first,
#      so that the one-GPU side gets the same ordering and this host's worker count too.
# OUT gets: runs.json, scaling.md, test_costs.json, and per run RUN.log + RUN_workers/.
set -uo pipefail
OUT=${1:?usage: ci/tier_scaling.sh OUT [pytest selection...]}
shift
SEL=("$@")
[ ${#SEL[@]} -eq 0 ] && SEL=(-m "not slow")
BUDGET_S=${BUDGET_S:-3000}
N=$(nvidia-smi -L | grep -c '^GPU ')
ONE_N=${ONE_N:-12}
ALL_N=${ALL_N:-$(python3 ci/xdist_plan.py workers --gpus "$N")}
ONE_N2=${ONE_N2:-$(python3 ci/xdist_plan.py workers --gpus 1)}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT"
START=$(date +%s)
XDIST=()
if python3 -c "import inspect, sys, xdist.plugin as p; sys.exit('maxschedchunk' not in inspect.getsource(p))"; then
  XDIST=(--maxschedchunk 1)  # one test at a time after the first two: greedy, longest first
fi
echo "[]" > "$OUT/runs.json"

# run NAME GPUS WORKERS ORDER MAX_S: one timed pytest run with fresh caches.
run() {
  local name=$1 gpus=$2 workers=$3 order=$4 max_s=$5 left
  left=$((BUDGET_S - ($(date +%s) - START) - 10))
  if [ "$left" -lt "${MIN_S:-60}" ]; then
    echo "== $name: skipped ($left s left)"
    return 0
  fi
  [ "$left" -lt "$max_s" ] && max_s=$left  # a run cut off by its limit is recorded, not counted
  local cache="/tmp/tier_scaling_cache/$name" devs costs_env=()
  rm -rf "$cache" && mkdir -p "$cache/triton" "$cache/inductor" "$OUT/${name}_workers"
  if [ "$gpus" -eq 1 ]; then devs=0; else devs=$(seq -s, 0 $((gpus - 1))); fi
  [ "$order" = cost ] && costs_env=(BLOCKATTN_TEST_COSTS="$OUT/test_costs.json")
  echo "== $name: CUDA_VISIBLE_DEVICES=$devs pytest -n $workers ${XDIST[*]} ${SEL[*]} (order $order, cold caches, limit $max_s s)"
  local t0 t1 rc
  t0=$(date +%s.%N)
  env CUDA_VISIBLE_DEVICES="$devs" TRITON_CACHE_DIR="$cache/triton" \
      TORCHINDUCTOR_CACHE_DIR="$cache/inductor" BLOCKATTN_WORKER_LOG="$OUT/${name}_workers" \
      "${costs_env[@]}" timeout "$max_s" python3 -m pytest -n "$workers" "${XDIST[@]}" -q \
      -p no:cacheprovider "${SEL[@]}" > "$OUT/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local wall result
  wall=$(python3 -c "print(round($t1 - $t0, 1))")
  result=$(tail -n 1 "$OUT/$name.log" | tr -d '=' | sed 's/^ *//; s/ *$//')
  echo "   exit $rc in $wall s: $result"
  local done_n
  done_n=$(cat "$OUT/${name}_workers"/*.durations.jsonl 2>/dev/null | wc -l)
  python3 - "$OUT/runs.json" "$name" "$gpus" "$workers" "$order" "$wall" "$rc" "$result" "$done_n" <<'EOF'
import json, sys
path, name, gpus, workers, order, wall, rc, result, done_n = sys.argv[1:]
runs = json.load(open(path))
if rc != "0":
    result = f"exit {rc}, {done_n} tests ended: {result}"[:200]
runs.append({"name": name, "gpus": int(gpus), "workers": int(workers), "order": order,
             "wall_s": float(wall), "exit": int(rc), "ok": rc == "0", "tests_ended": int(done_n),
             "result": result})
json.dump(runs, open(path, "w"), indent=1)
EOF
}

run "1gpu_n${ONE_N}" 1 "$ONE_N" collection "${ONE_MAX_S:-1200}"
ORDER=collection
python3 ci/xdist_plan.py costs "$OUT/1gpu_n${ONE_N}_workers" "$OUT/test_costs.json" && ORDER=cost
run "${N}gpu_n${ALL_N}" "$N" "$ALL_N" "$ORDER" "${ALL_MAX_S:-900}"
if [ "$ONE_N2" != "$ONE_N" ] || [ "$ORDER" = cost ]; then
  run "1gpu_n${ONE_N2}_cost" 1 "$ONE_N2" "$ORDER" "${ONE2_MAX_S:-1200}"
fi
python3 ci/xdist_plan.py table "$OUT/runs.json" | tee "$OUT/scaling.md"
