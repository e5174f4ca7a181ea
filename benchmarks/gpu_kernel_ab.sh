#!/usr/bin/env bash
# One device call for a kernel change: the Gluon backward tests (plain and rotary) on this tree,
# then benchmarks/ab_kernels.py against .ab/a (a saved blockattn/kernels folder, e.g. the last
# commit's: mkdir -p .ab/a && git archive HEAD blockattn/kernels | tar -x -C .ab/a
# --strip-components 2; carry .ab), plain and rotary, rotate_v on and off, fwd and bwd.
# Usage: bash benchmarks/gpu_kernel_ab.sh OUTDIR [COMMIT] [DTYPES]   (logs in OUTDIR/run.tgz)
set -uo pipefail
source "$(dirname "$0")/gpu_steps.sh"
start_run "$1" "${2:-unknown}"
step gluon_tests timeout 240 python3 -m pytest -q -n 4 -p no:cacheprovider \
  tests/kernels/test_gluon_rotary.py tests/kernels/test_gluon_path.py
step ab timeout 280 python3 benchmarks/ab_kernels.py --a .ab/a --out "$r/ab" --rounds 3 \
  --rep-ms 100 --dtypes "${3:-bf16}" --rotary both --rotate-v both
finish_run
