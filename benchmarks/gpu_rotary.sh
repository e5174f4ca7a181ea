#!/usr/bin/env bash
# GPU work of the fifth issue-23 session (rotary <= 1.35x plain, no spills, the two-chain
# kernel's exposed loads), one device call per phase; results in results/h200_2026-11-25e/.
# Phases r, w and s A/B a candidate kernel tree (the working tree, with a patch of
# results/h200_2026-11-25e/patches/ applied) against the last commit's kernels saved in .ab/a
# (carry it; see benchmarks/ab_kernels.py):
#   phase r: rotary_halves.patch: the rotary kernel tests on sm_90; the A/B; the stage profile
#   phase w: rotary_d128_launch_configs.patch: the A/B for three rotary D128 launch configs
#   phase s: a Gluon-path candidate (gluon2_register_stores, gluon2_qk_loaded_after_dp,
#            gluon_row0_a_tile_ahead): the Gluon path's tests; the A/B; probe_chains.py
#   phase f: the Hopper path's tests, then again with .ab/a's attention_hopper.py (the one
#            before FITS); the bench three times (blockattn, fa2; main shapes)
#   phase g: phase f's tests only (after the rotary D128 qk-only case got enough tiles for a
#            loop: before FITS its backward must fail to launch)
#   phase h: after the plain D128 forward's late V load, on an H100: the A/B, false alarms,
#            the core mutants against the H100 baseline
# Usage: bash benchmarks/gpu_rotary.sh r|w|s|f|g|h OUTDIR [COMMIT]
set -uo pipefail
phase=$1
out=${2:-$OUT}
export BLOCKATTN_GIT_COMMIT=${3:-unknown}  # the device copy has no usable .git
r=$out
mkdir -p "$r"
source "$(dirname "$0")/gpu_steps.sh"
step install python3 -m pip install -q --no-deps --no-build-isolation -e .
if [ "$phase" = r ]; then
  step rotary_tests timeout 200 python3 -m pytest -n 8 -q -x -p no:cacheprovider tests/kernels \
    -k "rot or sinu"
  step ab timeout 200 python3 benchmarks/ab_kernels.py --a .ab/a --out "$r/ab"
  step stages timeout 150 python3 benchmarks/stage_profile.py --out "$r/stages" --head-dims 128
fi
if [ "$phase" = w ]; then
  for cfg in "fwd,8,1,0;bwd,8,2,0" "fwd,4,1,0;bwd,4,1,0" "fwd,8,1,0;bwd,8,1,0"; do
    tag=$(echo "$cfg" | tr ';,' '__')
    step "ab_$tag" env BLOCKATTN_EXP_CFG="$cfg" timeout 120 python3 benchmarks/ab_kernels.py \
      --a .ab/a --out "$r/ab_$tag"
  done
fi
if [ "$phase" = s ]; then
  step gluon_tests timeout 200 python3 -m pytest -q -x -p no:cacheprovider \
    tests/kernels/test_gluon_path.py
  step ab timeout 200 python3 benchmarks/ab_kernels.py --a .ab/a --out "$r/ab"
  step probe timeout 150 python3 benchmarks/probe_chains.py --out "$r/probe"
fi
if [ "$phase" = f ] || [ "$phase" = g ]; then
  step hopper_tests timeout 200 python3 -m pytest -q -p no:cacheprovider \
    tests/kernels/test_hopper_path.py
  cp blockattn/kernels/attention_hopper.py "$r/attention_hopper.fixed"
  cp .ab/a/attention_hopper.py blockattn/kernels/attention_hopper.py
  step hopper_tests_before_fits timeout 200 python3 -m pytest -q -p no:cacheprovider \
    tests/kernels/test_hopper_path.py -k d128-rotary-qk
  cp "$r/attention_hopper.fixed" blockattn/kernels/attention_hopper.py && rm "$r/attention_hopper.fixed"
  for i in $([ "$phase" = f ] && echo 1 2 3); do
    step "bench_$i" timeout 150 python3 -m blockattn bench --providers blockattn,fa2 \
      --out "$r/bench_$i" --no-sweeps --time-budget-s 120
  done
fi
if [ "$phase" = h ]; then  # after the plain D128 forward's late V load (885e7dc), on an H100
  step ab timeout 150 python3 benchmarks/ab_kernels.py --a .ab/a --out "$r/ab"
  step false_alarms timeout 200 python3 -m blockattn false-alarms --tolerances v5 --seeds 8 \
    --fuzz 2 --every-distribution --profile gpu --out "$r/false_alarms"
  step mutants timeout 280 python3 -m blockattn mutants --jobs 14 --tolerances v5 \
    --baseline ci/baselines/h100/report.json --group core --out "$r/mutants_core"
fi
