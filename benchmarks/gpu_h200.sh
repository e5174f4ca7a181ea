#!/usr/bin/env bash
# H200 device work after the spill-free rotary kernels: a schema-2 (elementwise, tolerances v5)
# gate baseline for the H200 (the stored one has whole-tensor metrics only, so mutants against it
# failed their control), the gate judged against it, the bench, and every mutant against it.
# Results: results/h200_2026-11-26c/.   Usage: bash benchmarks/gpu_h200.sh OUTDIR [COMMIT]
set -uo pipefail
source "$(dirname "$0")/gpu_steps.sh"
start_run "${1:-$OUT}" "${2:-unknown}"
step bless_h200 timeout 150 python3 -m blockattn run --providers blockattn,fa2,eager \
  --corpus-only --tolerances v5 --out "$r/baseline_h200" --no-progress --no-contract
step gate timeout 150 python3 -m blockattn gate --tolerances v5 \
  --baseline "$r/baseline_h200/report.json" --out "$r/gate" --no-progress --no-contract
step bench timeout 150 python3 -m blockattn bench --providers blockattn,fa2 --no-sweeps \
  --out "$r/bench"
step mutants timeout 220 python3 -m blockattn mutants --jobs 14 --tolerances v5 \
  --baseline "$r/baseline_h200/report.json" --out "$r/mutants"
finish_run
