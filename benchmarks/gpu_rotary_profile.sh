#!/usr/bin/env bash
# One device call of the seventh issue-23 session (fused rotary bwd <= 1.35x plain): where the
# rotary backward's time goes, and whether two launches (attention.launch_bwd's two_pass) or the
# reverted Gluon rotary kernel's second way of loading beat the portable one-launch kernel.
#   1. benchmarks/ab_two_pass.py: one vs two launches, bitwise check, shape P D128/D64
#   2. the reverted Gluon rotary kernel (results/h200_2026-11-26/patches/gluon_rotary.patch on
#      f56944b, unpacked into .ab/glrot; carry .ab): its A/B at shape P D128, both loadings
#   3. Nsight Compute on each rotary backward kernel (mid-size shape, benchmarks/ncu_kernels.py)
# No pip install: PYTHONPATH picks the tree (the main one, or .ab/glrot for step 2 and its ncu).
# Usage: bash benchmarks/gpu_rotary_profile.sh OUTDIR [COMMIT]
set -uo pipefail
out=${1:-$OUT}
export BLOCKATTN_GIT_COMMIT=${2:-unknown}  # the device copy has no usable .git
r=$out/run
mkdir -p "$r"
source "$(dirname "$0")/gpu_steps.sh"
export PYTHONPATH=$PWD
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU" >> "$r/env.log"
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
  --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats
  --section Occupancy --section LaunchStats --section SourceCounters"
step ab_two_pass timeout 200 python3 benchmarks/ab_two_pass.py --out "$r/ab_two_pass" --rounds 3
step ncu_one timeout 150 "$NCU" -k 'regex:^_bwd_kernel$' --launch-count 1 $SECTIONS \
  --export "$r/ncu_one" python3 benchmarks/ncu_kernels.py --rotary
step ncu_two timeout 150 "$NCU" -k 'regex:^_bwd_kernel$' --launch-count 2 $SECTIONS \
  --export "$r/ncu_two" python3 benchmarks/ncu_kernels.py --rotary --two-pass
(
  cd .ab/glrot && export PYTHONPATH=$PWD
  step glrot_ab timeout 150 python3 benchmarks/ab_gluon_rotary.py --out "$r/glrot_ab" \
    --rounds 3 --head-dims 128
  step glrot_ncu env BLOCKATTN_KERNEL_PATH=prefer-gluon timeout 150 "$NCU" \
    -k 'regex:_bwd_rot_kernel' --launch-count 1 $SECTIONS --export "$r/ncu_glrot" \
    python3 benchmarks/ncu_kernels.py
)
for f in ncu_one ncu_two ncu_glrot; do
  [ -f "$r/$f.ncu-rep" ] && "$NCU" --import "$r/$f.ncu-rep" --page raw --csv > "$r/$f.raw.csv" 2>&1
done
tar -czf "$out/run.tgz" -C "$out" run
cp "$r/steps.log" "$out/steps.log"
