#!/usr/bin/env bash
# Issue 23, twelfth session: everything the closing note needs after the last kernel change, in
# two device calls:
#   phase t: the whole not-slow GPU tier (default dispatch), then `blockattn bench` three times
#            (blockattn, its fused rotary, FA v2; main shapes) and their medians
#            (benchmarks/bench_medians.py: medians.md)
#   phase m: every mutant in the catalog (the control's environments side by side), then the
#            false alarms (8 seeds x 2 fuzz cases, every distribution)
# Usage: bash benchmarks/gpu_verify.sh t|m OUTDIR BASELINE [COMMIT]
#   (BASELINE: ci/baselines/h200/report.json or ci/baselines/h100/report.json)
set -uo pipefail
phase=$1
source "$(dirname "$0")/gpu_steps.sh"
start_run "$2" "${4:-unknown}"
if [ "$phase" = t ]; then
  step pytest_gpu timeout 330 python3 -m pytest -n 12 -m "not slow" -q -p no:cacheprovider
  for i in 1 2 3; do
    step "bench_$i" timeout 90 python3 -m blockattn bench \
      --providers blockattn,blockattn_rotary,fa2 --out "$r/bench_$i" --no-sweeps \
      --no-projection --time-budget-s 80
  done
  python3 benchmarks/bench_medians.py "$r"/bench_{1,2,3} > "$r/medians.md" 2>&1
  cat "$r/medians.md"
fi
if [ "$phase" = m ]; then
  step mutants timeout 420 python3 -m blockattn mutants --jobs 14 --tolerances v5 \
    --baseline "$3" --out "$r/mutants"
  tail -8 "$r/mutants/mutants.md" 2>/dev/null
  step false_alarms timeout 230 python3 -m blockattn false-alarms --tolerances v5 --seeds 8 \
    --fuzz 2 --every-distribution --profile gpu --out "$r/false_alarms" --no-progress
fi
finish_run
