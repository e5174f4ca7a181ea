#!/usr/bin/env bash
# Issue 23, eleventh session: the Gluon fused-rotary backward with its MMAs issued asynchronously
# (ALU work of the same tile under them), in one device call:
#   rotary_tests: tests/kernels/test_gluon_rotary.py on this tree's module
#   ab:           benchmarks/ab_gluon_rotary.py, this tree's module against every .ab/*/ module
#                 carried (e.g. .ab/a: the previous commit's kernels)
#   stages:       (STAGES=1) the stage profile with prefer-gluon (rotary: this tree's kernel)
#   ncu_*:        Nsight Compute of this tree's rotary kernel (NCU_ALL=1: also the plain
#                 two-chain Gluon backward): raw metrics and per-SASS-instruction stall samples
# Usage: bash benchmarks/gpu_rotary_overlap.sh OUTDIR [COMMIT]   (logs tarred in OUTDIR/run.tgz)
set -uo pipefail
source "$(dirname "$0")/gpu_steps.sh"
start_run "${1:-$OUT}" "${2:-unknown}"
step rotary_tests timeout 200 python3 -m pytest -q tests/kernels/test_gluon_rotary.py \
  -p no:cacheprovider
a_args=()
for d in .ab/*/; do [ -f "$d/attention_gluon_rotary.py" ] && a_args+=(--a "${d%/}"); done
step ab timeout 240 python3 benchmarks/ab_gluon_rotary.py --out "$r/ab" --rounds 3 --rep-ms 100 \
  "${a_args[@]}"
[ "${STAGES:-0}" = 1 ] && step stages timeout 150 python3 benchmarks/stage_profile.py \
  --out "$r/stages" --path prefer-gluon --head-dims 128,64
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats
  --section SchedulerStats --section Occupancy --section LaunchStats --section SourceCounters"
ncu_step() {  # ncu_step NAME KERNEL_REGEX ARGS...: raw metrics and the SASS source page
  local name=$1 regex=$2; shift 2
  step "$name" timeout 150 "$NCU" --clock-control none -k "regex:$regex" --launch-count 1 \
    $SECTIONS --export "$r/$name" python3 benchmarks/ncu_kernels.py "$@"
  "$NCU" --import "$r/$name.ncu-rep" --page raw --csv > "$r/$name.raw.csv" 2>&1
  "$NCU" --import "$r/$name.ncu-rep" --page source --csv --print-source sass \
    > "$r/$name.sass.csv" 2> "$r/$name.sass.err"
  rm -f "$r/$name.ncu-rep"
}
ncu_step ncu_rot_one '^_bwd_rot_kernel$' --gluon-rotary
[ "${NCU_ALL:-0}" = 1 ] && ncu_step ncu_plain_gluon _bwd_kernel_ws --plain
finish_run
