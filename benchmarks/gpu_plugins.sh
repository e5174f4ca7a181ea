#!/usr/bin/env bash
# GPU checks of "verify any kernel" (issue 13), in phases that each fit one device call.
#   phase 1: an outside kernel (examples/outside_kernel.py, copied to a scratch repo outside this
#            one): gate clean (must pass) and buggy (must fail), its replay line re-run from
#            elsewhere (must exit 1); the gate split into 2 shards run side by side, merged and
#            judged against the stored baseline; the new judge mutants; bench with --provider;
#            a quick audit (claims on their own kernels)
#   phase 2: the GPU test tier of the changed areas
# Usage: bash benchmarks/gpu_plugins.sh 1|2 OUTDIR   (logs land in OUTDIR/plugins-<phase>.tgz)
set -uo pipefail
phase=$1
out=${2:-$OUT}
repo=$PWD
r=/tmp/issue13
u=/tmp/userrepo
mkdir -p "$r" "$out" "$u"
export PYTHONPATH=$repo
source "$(dirname "$0")/gpu_steps.sh"  # step NAME CMD..., env.log
if [ "$phase" = 1 ]; then
  cp examples/outside_kernel.py "$u/"
  cd "$u"
  step clean python3 -m blockattn gate --provider outside_kernel:clean --tolerances v5 \
    --out "$r/clean" --no-progress
  step buggy python3 -m blockattn gate --provider bug=outside_kernel:buggy --tolerances v5 \
    --out "$r/buggy" --no-progress
  replay=$(grep -o 'blockattn replay [^`]*' "$r/buggy.log" | head -1)
  cd /
  step replay python3 -m $replay
  cd "$repo"
  (CUDA_VISIBLE_DEVICES=0 python3 -m blockattn gate --tolerances v5 --shard 1/2 \
     --out "$r/shard-1" --no-progress > "$r/shard-1.log" 2>&1) &
  p1=$!
  step shard2 python3 -m blockattn gate --tolerances v5 --shard 2/2 --out "$r/shard-2" --no-progress
  wait $p1; echo "== shard1: exit $?" | tee -a "$r/steps.log"
  step merge python3 -m blockattn merge "$r/shard-1" "$r/shard-2" --out "$r/merged"
  step merged_gate python3 -m blockattn gate --report "$r/merged" --tolerances v5 \
    --baseline ci/baselines/h100/report.json
  step mutants python3 -m blockattn mutants --group suite --jobs 8 --tolerances v5 \
    --baseline ci/baselines/h100/report.json --no-control --out "$r/mutants"
  cp examples/outside_kernel.py "$repo/benchmarks/_outside_kernel_tmp.py"
  step bench timeout 150 python3 -m blockattn bench --no-sweeps --no-extras --no-projection \
    --providers blockattn,fa2 --provider clean=benchmarks._outside_kernel_tmp:clean \
    --gpu-kind nvidia-h100-x1 --time-budget-s 110 --out "$r/bench"
  rm -f "$repo/benchmarks/_outside_kernel_tmp.py"
  step audit timeout 170 python3 -m blockattn audit --quick --seeds 2 --shape-scale 0.25 \
    --kind accuracy --distributions normal,near_constant --out "$r/audit"
else
  # The plugin is found through its pytest11 entry point: install the package (editable, no deps).
  step install python3 -m pip install -q --no-deps --no-build-isolation -e .
  step pytest timeout 520 python3 -m pytest -n 8 -m "not slow" -q -p no:cacheprovider \
    tests/providers tests/harness tests/plugin tests/audit tests/ci tests/bounds \
    tests/kernels/test_packed_projection.py tests/kernels/test_ops_integration.py
fi
tar czf "$out/plugins-$phase.tgz" -C "$r" . 2>/dev/null
cp "$r/steps.log" "$out/steps-$phase.log"
