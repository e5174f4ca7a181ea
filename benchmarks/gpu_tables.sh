#!/usr/bin/env bash
# Device work for the spill-free rotary kernels (QK^T in column chunks in the forward, the
# backward's second-half tables kept apart: _qk_chunks, _load_table): the A/B against the last
# commit's kernels, the chunk tests, compute-sanitizer on the chunked forwards, then the GPU tier,
# the mutants and the false alarms. Results: results/<gpu>_2026-11-26*/.
#   phase a: the A/B (bf16, fp16, medians of 3 alternating rounds), the rotary kernel tests,
#            compute-sanitizer (memcheck) on the chunked forward tests
#   phase m: the GPU tier (not slow), all mutants against the H100 baseline, false alarms
# Usage: bash benchmarks/gpu_tables.sh a|m OUTDIR [COMMIT]   (phase a needs .ab/a carried:
#   mkdir -p .ab/a && git archive BASE blockattn/kernels | tar -x -C .ab/a --strip-components 2)
set -uo pipefail
phase=$1
source "$(dirname "$0")/gpu_steps.sh"
start_run "${2:-$OUT}" "${3:-unknown}"
if [ "$phase" = a ]; then
  step ab timeout 240 python3 benchmarks/ab_kernels.py --a .ab/a --out "$r/ab" \
    --dtypes bf16,fp16 --rounds 3
  step rotary_tests timeout 200 python3 -m pytest -n 8 -q -p no:cacheprovider tests/kernels \
    -k "rot or sinu or chunks"
  step sanitizer timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck \
    --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_attention.py \
    -k "fwd_chunks and bf16 and rotate-v"
fi
if [ "$phase" = m ]; then
  suite ci/baselines/h100/report.json  # gpu_steps.sh (more than one 600 s call holds: split it)
fi
finish_run
