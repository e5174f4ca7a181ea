#!/usr/bin/env bash
# Does the GPU test tier scale with GPUs? (issue 44 item 4.) Times the same pytest selection on
# all GPUs of this host and on one of them, with the same Triton/Inductor cache state, and writes
# the table and its verdict (N GPUs >= 0.8 N times as fast as one GPU at its best -n among those
# timed; ci/xdist_plan.py).
#
#   bash ci/tier_scaling.sh OUT [pytest selection...]     (default selection: -m "not slow")
#
# CACHE=warm (default): the state a CI runner with a kept cache has.
#   0. warm-up: the selection once on all GPUs (-n ALL_N; longest first by WARM_COSTS, default
#      ci/baselines/test_costs_gpu.json where it exists, else collection order) into one cache;
#      its per-test seconds (cold; WARM_COSTS for the tests it did not end) become the cost
#      table of the timed runs. Not timed for the verdict.
#   1. all GPUs, -n ALL_N (default: ci/xdist_plan.py workers), longest first;
#   2. one GPU (CUDA_VISIBLE_DEVICES=0), -n ONE_N (default: xdist_plan.py workers --gpus 1),
#      longest first, with all the time that is left;
#   3. one GPU at -n ONE_N2 (default 12, the best -n of a 16-core H200), if time is left.
#   Every timed run starts from its own copy of the cache as the warm-up left it: the same state
#   for each, even where the warm-up was cut by its limit.
# CACHE=cold: no warm-up; every run gets an empty cache; the one-GPU run goes first, in
#   collection order, and its seconds order the rest.
# Hypothesis draws are fixed for all runs (--hypothesis-seed HYP_SEED, default 44): every run
# compiles and runs the same shapes, so the warm-up warms what the timed runs need.
# A run cut by its limit is recorded (exit 124) with the tests it ended: a one-GPU run cut at
# L s still bounds the speedup from below (>= L / the N-GPU time), which the verdict reports.
# Budget: BUDGET_S for everything (default 3000), WARM_MAX_S, ALL_FRAC (the N-GPU run's share of
# what is left after the warm-up, default 0.4: beyond it 0.8 N cannot be shown in this budget).
# OUT gets: runs.json, scaling.md, test_costs.json, costs_top.md (where the time went: the same
# tests' seconds in both runs, work done by equal elapsed times, CPU/GPU utilisation from
# util.tsv, failed tests), per run RUN.log + RUN_workers/.
set -uo pipefail
OUT=${1:?usage: ci/tier_scaling.sh OUT [pytest selection...]}
shift
SEL=("$@")
[ ${#SEL[@]} -eq 0 ] && SEL=(-m "not slow")
CACHE=${CACHE:-warm}
BUDGET_S=${BUDGET_S:-3000}
N=$(nvidia-smi -L | grep -c '^GPU ')
ALL_N=${ALL_N:-$(python3 ci/xdist_plan.py workers --gpus "$N")}
ONE_N=${ONE_N:-$(python3 ci/xdist_plan.py workers --gpus 1)}
ONE_N2=${ONE_N2:-12}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
START=$(date +%s)
CROOT=/tmp/tier_scaling_cache
rm -rf "$CROOT" && mkdir -p "$CROOT/warm/triton" "$CROOT/warm/inductor"
PYARGS=(-q -p no:cacheprovider --hypothesis-seed "${HYP_SEED:-44}")
if python3 -c "import inspect, sys, xdist.plugin as p; sys.exit('maxschedchunk' not in inspect.getsource(p))"; then
  PYARGS+=(--maxschedchunk 1)  # collection order (load): one test a send; with a table conftest runs loadgroup
fi
echo "[]" > "$OUT/runs.json"
python3 ci/xdist_plan.py sample "$OUT/util.tsv" & SAMPLER=$!  # CPU and GPU busy, every second
trap 'kill $SAMPLER 2>/dev/null' EXIT
left() { echo $((BUDGET_S - ($(date +%s) - START) - 10)); }

# run NAME GPUS WORKERS ORDER MAX_S CACHEDIR [record]: one pytest run; record=no for the warm-up.
run() {
  local name=$1 gpus=$2 workers=$3 order=$4 max_s=$5 cache=$6 record=${7:-yes} l devs
  local costs_env=(BLOCKATTN_TEST_COSTS=)  # empty: collection order (tests/conftest.py)
  l=$(left)
  if [ "$l" -lt "${MIN_S:-60}" ]; then
    echo "== $name: skipped ($l s left)"
    return 0
  fi
  [ "$l" -lt "$max_s" ] && max_s=$l  # a run cut off by its limit is recorded, not counted
  mkdir -p "$OUT/${name}_workers"
  if [ "$gpus" -eq 1 ]; then devs=0; else devs=$(seq -s, 0 $((gpus - 1))); fi
  [ "$order" = cost ] && costs_env=(BLOCKATTN_TEST_COSTS="$OUT/test_costs.json")
  [ "$order" = baseline ] && costs_env=(BLOCKATTN_TEST_COSTS="$WARM_COSTS")
  echo "== $name: CUDA_VISIBLE_DEVICES=$devs pytest -n $workers ${PYARGS[*]} ${SEL[*]} (order $order, cache $cache, limit $max_s s)"
  local t0 t1 rc
  t0=$(date +%s.%N)
  env CUDA_VISIBLE_DEVICES="$devs" TRITON_CACHE_DIR="$cache/triton" \
      TORCHINDUCTOR_CACHE_DIR="$cache/inductor" BLOCKATTN_WORKER_LOG="$OUT/${name}_workers" \
      "${costs_env[@]}" timeout "$max_s" python3 -m pytest -n "$workers" "${PYARGS[@]}" \
      "${SEL[@]}" > "$OUT/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local wall result done_n
  wall=$(python3 -c "print(round($t1 - $t0, 1))")
  result=$(tail -n 1 "$OUT/$name.log" | tr -d '=' | sed 's/^ *//; s/ *$//')
  done_n=$(cat "$OUT/${name}_workers"/*.durations.jsonl 2>/dev/null | wc -l)
  echo "   exit $rc in $wall s, $done_n tests ended: $result"
  [ "$record" = yes ] || { echo "$name $rc $wall $done_n" > "$OUT/$name.status"; return 0; }
  python3 - "$OUT/runs.json" "$name" "$gpus" "$workers" "$order" "$wall" "$rc" "$result" \
      "$done_n" "$CACHE" "$t0" <<'EOF'
import json, sys
path, name, gpus, workers, order, wall, rc, result, done_n, cache, t0 = sys.argv[1:]
runs = json.load(open(path))
if rc != "0":
    result = f"exit {rc}, {done_n} tests ended: {result}"[:200]
runs.append({"name": name, "gpus": int(gpus), "workers": int(workers), "order": order,
             "cache": cache, "wall_s": float(wall), "exit": int(rc), "ok": rc == "0",
             "tests_ended": int(done_n), "result": result, "t0": round(float(t0), 2)})
json.dump(runs, open(path, "w"), indent=1)
EOF
}

# fresh NAME: the cache a timed run starts from (a copy of the warm one, or empty when cold).
fresh() {
  rm -rf "${CROOT:?}/$1"
  if [ "$CACHE" = warm ]; then cp -a "$CROOT/warm" "$CROOT/$1"; else mkdir -p "$CROOT/$1/triton" "$CROOT/$1/inductor"; fi
  echo "$CROOT/$1"
}

ORDER=collection
WARM_COSTS=${WARM_COSTS:-ci/baselines/test_costs_gpu.json}
WARM_ORDER=collection
[ -f "$WARM_COSTS" ] && WARM_ORDER=baseline
if [ "$CACHE" = warm ]; then
  run warmup "$N" "$ALL_N" "$WARM_ORDER" "${WARM_MAX_S:-1200}" "$CROOT/warm" no
  du -sh "$CROOT/warm/triton" "$CROOT/warm/inductor" 2>/dev/null | sed 's/^/   warm cache: /'
  python3 ci/xdist_plan.py costs "$OUT/warmup_workers" "$OUT/test_costs.json" --fill "$WARM_COSTS" && ORDER=cost
  ALL_LIMIT=$(python3 -c "print(int($(left) * ${ALL_FRAC:-0.4}))")
  run "${N}gpu_n${ALL_N}" "$N" "$ALL_N" "$ORDER" "${ALL_MAX_S:-$ALL_LIMIT}" "$(fresh all)"
  run "1gpu_n${ONE_N}" 1 "$ONE_N" "$ORDER" "${ONE_MAX_S:-1200}" "$(fresh one)"
  [ "$ONE_N2" != "$ONE_N" ] && run "1gpu_n${ONE_N2}" 1 "$ONE_N2" "$ORDER" "${ONE2_MAX_S:-1200}" "$(fresh one2)"
else
  run "1gpu_n${ONE_N2}" 1 "$ONE_N2" collection "${ONE_MAX_S:-1200}" "$(fresh one)"
  python3 ci/xdist_plan.py costs "$OUT/1gpu_n${ONE_N2}_workers" "$OUT/test_costs.json" && ORDER=cost
  run "${N}gpu_n${ALL_N}" "$N" "$ALL_N" "$ORDER" "${ALL_MAX_S:-900}" "$(fresh all)"
  [ "$ONE_N" != "$ONE_N2" ] && run "1gpu_n${ONE_N}_cost" 1 "$ONE_N" "$ORDER" "${ONE2_MAX_S:-1200}" "$(fresh one2)"
fi
python3 ci/xdist_plan.py top "$OUT" > "$OUT/costs_top.md" 2>&1
python3 ci/xdist_plan.py table "$OUT/runs.json" | tee "$OUT/scaling.md"
