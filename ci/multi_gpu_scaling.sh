#!/usr/bin/env bash
# One device call on a multi-GPU host for issue 44 items 3 and 4 (results/<gpu>x2_*/):
#   1. blockattn bench twice (blockattn only, main shapes): the copy and the read-mostly
#      ceilings in the same run, every pass's bandwidth against both (bench_medians.md);
#   2. ci/tier_scaling.sh with what is left of LIMIT_S: a warm-up of the selection on all GPUs
#      into one Triton/Inductor cache, then all GPUs and one GPU, each from its own copy of that
#      cache (the same state), longest first by the warm-up's per-test seconds; scaling.md holds
#      the table and the 0.8 N verdict, costs_top.md where the time went.
# BENCH_RUNS=0 skips step 1 (the tier alone: issue 44 item 4 in one call of 10 minutes).
# Runs from a clean snapshot of the commit (SNAP, made with `git archive`), not the working tree,
# so that nobody's uncommitted edits are timed.
#
#   bash ci/multi_gpu_scaling.sh OUT SNAP LIMIT_S [pytest selection...]
#
# OUT gets (<= 8 files, the device tool's limit): steps.log, env.log, bench_medians.md,
# scaling.md, runs.json, costs_top.md, test_costs.json, detail.tar.gz (every log, bench dir and
# worker file).
set -uo pipefail
OUT=${1:?usage: OUT SNAP LIMIT_S [selection...]}
SNAP=${2:?}
LIMIT_S=${3:?}
shift 3
START=$(date +%s)
OUT=$(realpath "$OUT")
W=/tmp/multi_scaling_work
rm -rf "$W" && mkdir -p "$W"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
cd "$SNAP" || exit 2
step() {  # step NAME CMD...: logged with its exit code and seconds in steps.log
  local name=$1 t rc
  shift
  echo "== $name: $*" | tee -a "$OUT/steps.log"
  t=$(date +%s)
  "$@" > "$W/$name.log" 2>&1
  rc=$?
  echo "== $name: exit $rc in $(($(date +%s) - t)) s" | tee -a "$OUT/steps.log"
  return $rc
}
{
  date -u
  nvidia-smi
  nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv
  echo "cores: $(nproc)"
  free -g
  cat /sys/fs/cgroup/memory.max 2>/dev/null
  python3 -c "import torch, triton, xdist; print('torch', torch.__version__, 'triton', triton.__version__, 'xdist', xdist.__version__)"
  cat COMMIT 2>/dev/null
} > "$OUT/env.log" 2>&1
# the snapshot's commit (no .git there): the caller's BLOCKATTN_GIT_COMMIT, else SNAP/COMMIT
export BLOCKATTN_GIT_COMMIT=${BLOCKATTN_GIT_COMMIT:-$(cat COMMIT 2>/dev/null)}
echo "commit: $BLOCKATTN_GIT_COMMIT" >> "$OUT/env.log"
git init -q . && git add -A && git -c user.email=ci@x -c user.name=ci commit -qm "snapshot"
[ -n "${SKIP_INSTALL:-}" ] || step install python3 -m pip install -q --no-deps --no-build-isolation -e .
# e.g. nvidia-h100-x2: the lent kind's name, from the GPU's and the count
KIND=$(python3 -c "import torch; print(torch.cuda.get_device_name(0).split()[1].lower() if torch.cuda.is_available() else 'cpu')")
KIND="nvidia-$KIND-x$(nvidia-smi -L | grep -c '^GPU ')"
for i in $(seq 1 "${BENCH_RUNS:-2}"); do
  step "bench_$i" env CUDA_VISIBLE_DEVICES=0 timeout 75 python3 -m blockattn bench --providers blockattn \
      --no-sweeps --no-extras --no-projection --time-budget-s 50 --gpu-kind "$KIND" \
      --out "$W/bench_$i" ${BENCH_ARGS:-}
done
[ "${BENCH_RUNS:-2}" -gt 0 ] && python3 - "$W" > "$OUT/bench_medians.md" 2>&1 <<'EOF'
import json, statistics, sys
from pathlib import Path
runs = [json.loads(p.read_text()) for p in sorted(Path(sys.argv[1]).glob("bench_*/bench.json"))]
if not runs:
    sys.exit("no bench.json")
med = lambda xs: statistics.median(xs) if xs else float("nan")
meta = runs[0]["meta"]
print(f"## {meta['gpu']} ({meta.get('gpu_kind')}), commit {meta['git']['commit'][:10]}, "
      f"{len(runs)} bench runs, medians\n")
c = [r["ceiling"]["tbps"] for r in runs]
rm = [r["read_mostly_ceiling"]["tbps"] for r in runs]
print(f"copy ceiling: {med(c):.3f} TB/s (runs: {', '.join(f'{x:.3f}' for x in c)})  ")
print(f"read-mostly ceiling (3 read : 1 written): {med(rm):.3f} TB/s (runs: "
      f"{', '.join(f'{x:.3f}' for x in rm)}) = {med(rm) / med(c):.3f}x the copy  ")
for i, r in enumerate(runs):
    ch = r["ceiling_checks"]
    meths = ", ".join(f"{k}: {v:.3f}" for k, v in r["read_mostly_ceiling"]["methods_tbps"].items())
    print(f"run {i + 1}: read-mostly methods (TB/s): {meths}; >= copy and every pass: {ch['ok']} "
          f"(fastest pass {ch['max_pass']} {ch['max_pass_tbps']:.3f} TB/s)  ")
print("\n| case | pass | ms | TB/s | % copy ceiling | % read-mostly ceiling |")
print("|---|---|---:|---:|---:|---:|")
keys = []
for r in runs[0]["measurements"]:
    if r.get("ms") and r.get("tbps"):
        keys.append((r["case"], r["provider"], r["pass"]))
for k in keys:
    rows = [m for r in runs for m in r["measurements"]
            if (m["case"], m["provider"], m["pass"]) == k and m.get("ms")]
    print(f"| {k[0]} | {k[2]} | {med([m['ms'] for m in rows]):.3f} | "
          f"{med([m['tbps'] for m in rows]):.3f} | {med([m['pct_ceiling'] for m in rows]):.1f} | "
          f"{med([m['pct_read_mostly'] for m in rows]):.1f} |")
EOF
[ -f "$OUT/bench_medians.md" ] && cat "$OUT/bench_medians.md"
LEFT=$((LIMIT_S - ($(date +%s) - START) - 25))
echo "== tier_scaling: $LEFT s budget" | tee -a "$OUT/steps.log"
BUDGET_S=$LEFT bash ci/tier_scaling.sh "$W/tier" "$@" 2>&1 | tee "$W/tier_scaling.log"
cp "$W/tier/scaling.md" "$W/tier/runs.json" "$W/tier/costs_top.md" "$OUT/" 2>/dev/null
cp "$W/tier/test_costs.json" "$OUT/" 2>/dev/null
tar -czf "$OUT/detail.tar.gz" -C "$W" . 2>/dev/null
echo "== done in $(($(date +%s) - START)) s" | tee -a "$OUT/steps.log"
