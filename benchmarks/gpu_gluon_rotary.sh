#!/usr/bin/env bash
# One device call for the fused-rotary Gluon backward (blockattn.kernels.attention_gluon_rotary):
# its GPU tests (FP64-oracle bound, close to the portable kernel, repeatable, contained), the
# A/B against the portable rotary kernel with the plain bwd beside it (shape P, same run), then
# the suite's rotary kernel tests routed through it (BLOCKATTN_KERNEL_PATH=prefer-gluon).
# Few files come back from a device call: every log goes straight into OUTDIR.
# Usage: bash benchmarks/gpu_gluon_rotary.sh OUTDIR [COMMIT]
set -uo pipefail
out=${1:-$OUT}
export BLOCKATTN_GIT_COMMIT=${2:-unknown}  # the device copy has no usable .git
r=$out
mkdir -p "$r"
source "$(dirname "$0")/gpu_steps.sh"
step install python3 -m pip install -q --no-deps --no-build-isolation -e .
step tests timeout 150 python3 -m pytest -q -p no:cacheprovider \
  tests/kernels/test_gluon_rotary_path.py tests/kernels/test_gluon_path.py -k "rotary or dispatch"
step ab timeout 150 python3 benchmarks/ab_gluon_rotary.py --out "$r" --rounds 3
step suite_rotary env BLOCKATTN_KERNEL_PATH=prefer-gluon timeout 120 python3 -m pytest -n 8 -q \
  -p no:cacheprovider tests/kernels -k "rot or sinu"
