#!/usr/bin/env bash
# Device work for the rotary backward in column chunks (LaunchConfig.chunks, the D = 128
# default): the A/B against the whole-tile body, the rotary kernel tests, the GPU tier, the
# rotary and precision mutants and the false alarms. Results: results/<gpu>_2026-11-26*/.
#   phase a: the A/B (bf16, fp16; chunks 1, 2, 4) and the rotary kernel tests
#   phase m: the GPU tier (not slow), all mutants against the H100 baseline, false alarms
#   phase s: on an H200: the A/B (chunks 1, 2), the chunked path's test, its mutants against
#            the H200 baseline (that baseline lacks elementwise metrics: the control fails)
#   phase t: on an H100: the chunked path's test, its mutants against the H100 baseline
# Usage: bash benchmarks/gpu_chunks.sh a|m|s|t OUTDIR [COMMIT]
set -uo pipefail
phase=$1
source "$(dirname "$0")/gpu_steps.sh"
start_run "${2:-$OUT}" "${3:-unknown}"
if [ "$phase" = a ]; then
  step ab timeout 200 python3 benchmarks/ab_chunks.py --out "$r/ab" --chunks 1,2,4 --rounds 3
  step rotary_tests timeout 200 python3 -m pytest -n 8 -q -p no:cacheprovider tests/kernels \
    -k "rot or sinu"
fi
if [ "$phase" = m ]; then
  suite ci/baselines/h100/report.json  # gpu_steps.sh (more than one 600 s call holds: split it)
fi
if [ "$phase" = s ]; then
  step ab timeout 200 python3 benchmarks/ab_chunks.py --out "$r/ab" --chunks 1,2 --rounds 3
  step chunk_tests timeout 120 python3 -m pytest -q -p no:cacheprovider \
    tests/kernels/test_attention.py -k "chunks or rotary"
  step mutants_chunks timeout 240 python3 -m blockattn mutants --jobs 6 --tolerances v5 \
    --baseline ci/baselines/h200/report.json --mutant chunks-table-offset \
    --mutant chunks-dq-first-k-chunk --mutant chunks-dv-not-rotated-back \
    --mutant chunks-qk-lo-dropped --mutant chunks-dp-v-lo-dropped --out "$r/mutants_chunks"
fi
if [ "$phase" = t ]; then
  step chunk_tests timeout 200 python3 -m pytest -n 4 -q -p no:cacheprovider \
    tests/kernels/test_attention.py -k chunks
  step mutants_chunks timeout 300 python3 -m blockattn mutants --jobs 6 --tolerances v5 \
    --baseline ci/baselines/h100/report.json --mutant chunks-table-offset \
    --mutant chunks-dq-first-k-chunk --mutant chunks-dv-not-rotated-back \
    --mutant chunks-qk-lo-dropped --mutant chunks-dp-v-lo-dropped --out "$r/mutants_chunks"
fi
finish_run
