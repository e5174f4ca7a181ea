#!/usr/bin/env bash
# Device work for the rotary kernels' table placements (attention.PLACEMENTS: where k's and V's
# sin/cos are read and when V is formed, chosen for 0 B of spills on CPU): the A/B against the
# last commit's kernels, then the GPU tier, the mutants and the false alarms.
#   phase a: the A/B at shape P (rotary, rotate_v on and off, D 64 and 128, bf16 and fp16,
#            medians of 3 alternating rounds) and the rotary kernel tests
#   phase b: the A/B of what landed (D 64, 5 rounds) and the bench with the fused rotary provider
#   phase h (an H200): the A/B of what landed (D 64, 5 rounds), all mutants against the H200
#   baseline, the false alarms
#   phase t: the GPU tier (not slow); phase m: all mutants against the H100 baseline, the false
#   alarms (gpu_steps.sh's suite, split in two: one 600 s call does not hold it)
# Usage: bash benchmarks/gpu_placement.sh a|b|h|t|m OUTDIR [COMMIT]   (phase a needs .ab/a carried:
#   mkdir -p .ab/a && git archive BASE blockattn/kernels | tar -x -C .ab/a --strip-components 2)
set -uo pipefail
phase=$1
source "$(dirname "$0")/gpu_steps.sh"
start_run "${2:-$OUT}" "${3:-unknown}"
if [ "$phase" = a ]; then
  step ab timeout 300 python3 benchmarks/ab_kernels.py --a .ab/a --out "$r/ab" \
    --dtypes bf16,fp16 --dims 64,128 --rotary on --rotate-v both --rounds 3
  step rotary_tests timeout 200 python3 -m pytest -n 8 -q -p no:cacheprovider tests/kernels \
    -k "rot or sinu or chunks"
fi
ab_d64() {  # the A/B of what landed: D 64, 5 rounds
  step ab_d64 timeout 200 python3 benchmarks/ab_kernels.py --a .ab/a --out "$r/ab_d64" \
    --dtypes bf16,fp16 --dims 64 --rotary on --rotate-v both --rounds 5
}
if [ "$phase" = b ]; then
  ab_d64
  step bench timeout 240 python3 -m blockattn bench --providers blockattn,blockattn_rotary,fa2 \
    --no-sweeps --out "$r/bench"
fi
if [ "$phase" = h ]; then
  ab_d64
  checks ci/baselines/h200/report.json  # gpu_steps.sh
fi
if [ "$phase" = t ]; then
  step pytest_gpu timeout 480 python3 -m pytest -n 12 -m "not slow" -q -p no:cacheprovider
fi
if [ "$phase" = m ]; then
  checks ci/baselines/h100/report.json 330  # gpu_steps.sh
fi
finish_run
