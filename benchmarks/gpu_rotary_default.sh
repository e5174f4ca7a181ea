#!/usr/bin/env bash
# Issue 23, eleventh session: the Gluon fused-rotary backward as the sm_90 default (dispatch
# auto, attention_gluon_rotary.CONFIGS), checked and timed in few device calls:
#   phase t: the whole not-slow GPU tier by default (every rotary backward at D = 64/128 now
#            goes to attention_gluon_rotary); the bench (blockattn, its fused rotary, FA v2)
#   phase m: every mutant in the catalog (tolerances v5, this GPU's baseline); the bench; the
#            rotary A/B in fp16
#   phase r: the Gluon rotary mutants only; false alarms (8 seeds, every distribution)
# Usage: bash benchmarks/gpu_rotary_default.sh t|m|r OUTDIR BASELINE [COMMIT]
#   (BASELINE: ci/baselines/h200/report.json or ci/baselines/h100/report.json)
set -uo pipefail
phase=$1
source "$(dirname "$0")/gpu_steps.sh"
start_run "$2" "${4:-unknown}"
baseline=$3
if [ "$phase" = t ]; then
  step pytest_gpu timeout 330 python3 -m pytest -n 12 -m "not slow" -q -p no:cacheprovider
  step bench timeout 230 python3 -m blockattn bench --providers blockattn,blockattn_rotary,fa2 \
    --out "$r/bench" --no-sweeps --time-budget-s 200
fi
if [ "$phase" = m ]; then
  step mutants timeout 330 python3 -m blockattn mutants --jobs 14 --tolerances v5 \
    --baseline "$baseline" --out "$r/mutants"
  step bench timeout 150 python3 -m blockattn bench --providers blockattn,blockattn_rotary,fa2 \
    --out "$r/bench" --no-sweeps --time-budget-s 120
  step ab_fp16 timeout 80 python3 benchmarks/ab_gluon_rotary.py --out "$r/ab_fp16" --rounds 2 \
    --rep-ms 100 --dtypes fp16
fi
if [ "$phase" = r ]; then
  # shellcheck disable=SC2046  # one word per argument
  step mutants timeout 300 python3 -m blockattn mutants $(mutant_args_for attention_gluon_rotary.py) \
    --jobs 7 --tolerances v5 \
    --baseline "$baseline" --out "$r/mutants"
  step false_alarms timeout 200 python3 -m blockattn false-alarms --tolerances v5 --seeds 8 \
    --fuzz 2 --every-distribution --profile gpu --out "$r/false_alarms" --no-progress
fi
finish_run
