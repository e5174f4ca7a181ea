#!/usr/bin/env bash
# GPU checks of the elementwise verdicts (issue 12), in two phases that each fit one device call.
#   phase 1: GPU test tier, bless a gate baseline (blockattn/tolerances/v5.toml), gate it against itself,
#            the elementwise blockattn vs FA v2 table, A/B timing of the kernel change
#   phase 2: false alarms (20 seeds x every distribution) and every mutant, gated with the
#            baseline blessed in phase 1 (ci/baselines/h100/report.json once committed)
# Usage: bash benchmarks/gpu_elementwise.sh 1|2 OUTDIR   (everything lands in OUTDIR/logs.tgz)
set -uo pipefail
phase=$1
out=${2:-$OUT}
r=/tmp/issue12
mkdir -p "$r" "$out"
export PYTHONPATH=$PWD
source "$(dirname "$0")/gpu_steps.sh"  # step NAME CMD..., env.log
if [ "$phase" = 1 ]; then
  step pytest python3 -m pytest -n 8 -m "not slow" -q -p no:cacheprovider
  step bless python3 -m blockattn run --providers blockattn,fa2,eager --corpus-only \
    --tolerances blockattn/tolerances/v5.toml --out "$r/baseline" --no-progress
  step gate python3 -m blockattn gate --tolerances blockattn/tolerances/v5.toml --report "$r/baseline" \
    --baseline "$r/baseline/report.json"
  step table python3 benchmarks/elementwise_table.py --out "$r/table" \
    --providers blockattn,fa2,eager --tolerances blockattn/tolerances/v5.toml
  step ab python3 benchmarks/ab_kernels.py --a .ab/attention_a.py --out "$r/ab"
else
  step false_alarms python3 -m blockattn false-alarms --tolerances blockattn/tolerances/v5.toml \
    --seeds 20 --fuzz 2 --every-distribution --profile gpu --out "$r/false_alarms" --no-progress
  step mutants python3 -m blockattn mutants --jobs 12 --tolerances blockattn/tolerances/v5.toml \
    --baseline ci/baselines/h100/report.json --out "$r/mutants"
fi
tar czf "$out/logs.tgz" -C /tmp issue12
