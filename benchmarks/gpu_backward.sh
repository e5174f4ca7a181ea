#!/usr/bin/env bash
# GPU work on the Hopper backward (issue 23), one device call per phase.
#   phase a (2026-11-25, with the L2-prefetch patch kept in results/h100_2026-11-25b/
#            tune_prefetch/, since reverted): the bwd launch sweep with a prefetch axis
#            tune.py --kernels bwd --rotary off,on --programs-per-sm 0,2 --maxnreg=-1
#            --prefetch 0,1,2,3
#   phase b: A/B of the working tree's kernels against a saved copy in .ab/a (carried; see
#            benchmarks/ab_kernels.py), the GPU kernel tests, the stage profile at D=128
#   phase c: the bench (blockattn, fa2) and compile-check on sm_90
# Usage: bash benchmarks/gpu_backward.sh b|c OUTDIR [COMMIT]
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
  step compile python3 -m blockattn compile-check --targets sm_90,sm_100 --jobs 16
  step bench python3 -m blockattn bench --out "$r/bench" --providers blockattn,fa2
fi
