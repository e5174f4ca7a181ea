#!/usr/bin/env bash
# Device work of the seventh issue-23 session (fused rotary bwd <= 1.35x plain): Nsight Compute
# instruction counts and stalls of the plain and rotary kernels, then the bench three times.
# Results in results/h200_2026-11-26b/ (the A/Bs of that folder ran from the patches there).
#   ncu_plain_portable: the portable plain backward (BLOCKATTN_KERNEL_PATH=portable)
#   ncu_plain_gluon:    the shipped plain backward on an H200 (two-chain Gluon, _bwd_kernel_ws)
#   ncu_rotary:         the portable rotary backward (the shipped rotary path)
#   ncu_fwd:            the portable forward, plain then rotary
#   bench_1..3:         blockattn bench --providers blockattn,fa2 --no-sweeps
# Usage: bash benchmarks/gpu_rotary_profile.sh OUTDIR [COMMIT]
set -uo pipefail
source "$(dirname "$0")/gpu_steps.sh"
start_run "${1:-$OUT}" "${2:-unknown}"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
  --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats
  --section Occupancy --section LaunchStats --section SourceCounters"
ncu_step() {  # ncu_step NAME KERNEL_REGEX LAUNCHES [ENV...] -- ARGS...
  local name=$1 regex=$2 count=$3; shift 3
  step "$name" env "$@" timeout 150 "$NCU" -k "regex:$regex" --launch-count "$count" $SECTIONS \
    --export "$r/$name" python3 benchmarks/ncu_kernels.py ${NCU_ARGS:-}
  "$NCU" --import "$r/$name.ncu-rep" --page raw --csv > "$r/$name.raw.csv" 2>&1
  rm -f "$r/$name.ncu-rep"
}
NCU_ARGS=--plain ncu_step ncu_plain_portable '^_bwd_kernel$' 1 BLOCKATTN_KERNEL_PATH=portable
NCU_ARGS=--plain ncu_step ncu_plain_gluon '_bwd_kernel_ws' 1 X=1
NCU_ARGS=--rotary ncu_step ncu_rotary '^_bwd_kernel$' 1 X=1
NCU_ARGS= ncu_step ncu_fwd '^_fwd_kernel$' 2 X=1
python3 benchmarks/ncu_summary.py --tiles 5824 "$r"/ncu_*.raw.csv > "$r/ncu_summary.md" 2>&1
for i in 1 2 3; do
  step "bench_$i" timeout 170 python3 -m blockattn bench --providers blockattn,fa2 \
    --out "$r/bench_$i" --no-sweeps --time-budget-s 120
done
finish_run
cp "$r/ncu_summary.md" "$out/"
