#!/usr/bin/env bash
# Device work for the rotary backward in column chunks (LaunchConfig.chunks, the D = 128
# default): the A/B against the whole-tile body, the rotary kernel tests, the GPU tier, the
# rotary and precision mutants and the false alarms. Results: results/<gpu>_2026-11-26*/.
#   phase a: the A/B (bf16, fp16; chunks 1, 2, 4) and the rotary kernel tests
#   phase m: the GPU tier (not slow), all mutants against the H100 baseline, false alarms
# Usage: bash benchmarks/gpu_chunks.sh a|m OUTDIR [COMMIT]
set -uo pipefail
phase=$1
out=${2:-$OUT}
export BLOCKATTN_GIT_COMMIT=${3:-unknown}  # the device copy has no usable .git
r=$out/run
mkdir -p "$r"
source "$(dirname "$0")/gpu_steps.sh"
step install python3 -m pip install -q --no-deps --no-build-isolation -e .
if [ "$phase" = a ]; then
  step ab timeout 200 python3 benchmarks/ab_chunks.py --out "$r/ab" --chunks 1,2,4 --rounds 3
  step rotary_tests timeout 200 python3 -m pytest -n 8 -q -p no:cacheprovider tests/kernels \
    -k "rot or sinu"
fi
if [ "$phase" = m ]; then
  step pytest_gpu timeout 330 python3 -m pytest -n 8 -m "not slow" -q -p no:cacheprovider
  step mutants timeout 300 python3 -m blockattn mutants --jobs 14 --tolerances v5 \
    --baseline ci/baselines/h100/report.json --out "$r/mutants"
  step false_alarms timeout 200 python3 -m blockattn false-alarms --tolerances v5 --seeds 8 \
    --fuzz 2 --every-distribution --profile gpu --out "$r/false_alarms"
fi
tar -czf "$out/run.tgz" -C "$out" run
