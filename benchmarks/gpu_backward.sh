#!/usr/bin/env bash
# GPU work on the Hopper backward (issue 23), one device call per phase.
#   phase a (2026-11-25, with the L2-prefetch patch kept in results/h100_2026-11-25b/
#            tune_prefetch/, since reverted): the bwd launch sweep with a prefetch axis
#            tune.py --kernels bwd --rotary off,on --programs-per-sm 0,2 --maxnreg=-1
#            --prefetch 0,1,2,3
#   phase b: A/B of the working tree's kernels against a saved copy in .ab/a (carried; see
#            benchmarks/ab_kernels.py), the GPU kernel tests, the stage profile at D=128
#   phase c: compile-check on sm_90 and sm_100; the whole GPU test tier
#   phase d: every mutant against the H100 baseline; false alarms (12 seeds, every distribution)
#   phase e: the bench (blockattn, fa2), on whichever GPU the call got
#   phase f: after the judge mutants (issue 21): every mutant against the H100 baseline; the
#            tests changed since phase c (plugin, mutants, bounds)
# Usage: bash benchmarks/gpu_backward.sh b|c|d|e|f OUTDIR [COMMIT]
set -uo pipefail
phase=$1
out=${2:-$OUT}
export BLOCKATTN_GIT_COMMIT=${3:-unknown}  # the device copy has no usable .git
r=$out
mkdir -p "$r"
source "$(dirname "$0")/gpu_steps.sh"
step install python3 -m pip install -q --no-deps --no-build-isolation -e .
if [ "$phase" = b ]; then
  step ab python3 benchmarks/ab_kernels.py --a .ab/a --out "$r/ab"
  step kernels python3 -m pytest -q -x -n 8 tests/kernels -m "not slow" -p no:cacheprovider
  step stages python3 benchmarks/stage_profile.py --out "$r/stages" --head-dims 128
fi
if [ "$phase" = c ]; then
  step compile timeout 200 python3 -m blockattn compile-check --targets sm_90,sm_100 --jobs 16 \
    --json "$r/compile_check.json"
  step pytest_gpu timeout 340 python3 -m pytest -n 8 -m "not slow" -q -p no:cacheprovider
fi
if [ "$phase" = d ]; then
  step mutants timeout 250 python3 -m blockattn mutants --jobs 12 --tolerances v5 \
    --baseline ci/baselines/h100/report.json --out "$r/mutants"
  step false_alarms timeout 300 python3 -m blockattn false-alarms --tolerances v5 --seeds 12 \
    --fuzz 2 --every-distribution --profile gpu --out "$r/false_alarms" --no-progress
fi
if [ "$phase" = e ]; then
  step bench timeout 400 python3 -m blockattn bench --providers blockattn,fa2 --out "$r/bench" --no-sweeps \
    --time-budget-s 360
fi
if [ "$phase" = f ]; then
  step mutants timeout 480 python3 -m blockattn mutants --jobs 12 --tolerances v5 \
    --baseline ci/baselines/h100/report.json --out "$r/mutants"
  [ "${SKIP_TESTS:-0}" = 1 ] || step pytest_changed timeout 250 python3 -m pytest -n 8 -m "not slow" -q -p no:cacheprovider \
    tests/plugin tests/mutants tests/bounds tests/harness/test_refusals.py
fi
