#!/usr/bin/env bash
# GPU checks of the Hopper path and the rotary launch configs (issue 14), in phases that each fit
# one device call. Logs land in OUTDIR/hopper-<phase>.tgz plus OUTDIR/steps-<phase>.log.
#   phase 1: tests of the Hopper path (its own tests, then the kernel and non-finite test files
#            with the path forced); the rotary launch-config sweep (warps x register cap)
#   phase 2: the Hopper tests again (after a fix); stage profile at D128; every mutant
#   phase 3: the forced-path tests again (T = 0 fix); stage profile with the no-split bwd fixed;
#            the false-alarm check over every distribution
#   phase 4: every mutant with the Hopper path preferred (BLOCKATTN_KERNEL_PATH=prefer-hopper:
#            wherever it can run), control included; the stage profile of the Hopper path
#   phase 5: the Hopper mutants alone (each selects the path itself), control included
# Usage: bash benchmarks/gpu_hopper.sh 1|2 OUTDIR
set -uo pipefail
phase=$1
out=${2:-$OUT}
r=/tmp/hopper
mkdir -p "$r" "$out"
source "$(dirname "$0")/gpu_steps.sh"  # step NAME CMD..., env.log
step install python3 -m pip install -q --no-deps --no-build-isolation -e .
if [ "$phase" = 1 ]; then
  step pytest_hopper timeout 200 python3 -m pytest -n 8 -q -p no:cacheprovider \
    tests/kernels/test_hopper_path.py
  # Every bf16/fp16 kernel test on the Hopper path. Deselected: what the forced path refuses by
  # design (fp32; NaN-padded inputs whose heads are not packed, which TMA's 2-D view cannot walk).
  step pytest_forced env BLOCKATTN_KERNEL_PATH=hopper timeout 240 python3 -m pytest -n 8 -q \
    -p no:cacheprovider -k "not fp32 and not nan_poisoning and not persistent_grid" \
    tests/kernels/test_attention.py \
    tests/reliability/test_nonfinite.py
  step tune_rotary timeout 280 python3 benchmarks/tune.py --out "$r/tune_rotary" \
    --rotary on --warps 4,8 --maxnreg none,128,168 --time-budget-s 230
elif [ "$phase" = 3 ]; then
  step pytest_forced env BLOCKATTN_KERNEL_PATH=hopper timeout 150 python3 -m pytest -n 8 -q \
    -p no:cacheprovider -k "not fp32 and not nan_poisoning and not persistent_grid" \
    tests/kernels/test_hopper_path.py tests/kernels/test_attention.py \
    tests/reliability/test_nonfinite.py
  step stages timeout 170 python3 benchmarks/stage_profile.py --out "$r/stages" --head-dims 128,64
  step false_alarms timeout 250 python3 -m blockattn false-alarms --tolerances v5 --seeds 20 \
    --fuzz 2 --every-distribution --profile gpu --out "$r/false_alarms" --no-progress
elif [ "$phase" = 4 ]; then
  step mutants_hopper env BLOCKATTN_KERNEL_PATH=prefer-hopper timeout 330 python3 -m blockattn \
    mutants --jobs 12 --tolerances v5 --baseline ci/baselines/h100/report.json \
    --out "$r/mutants_hopper"
  step stages_hopper timeout 150 python3 benchmarks/stage_profile.py --path hopper \
    --out "$r/stages_hopper" --head-dims 128
elif [ "$phase" = 5 ]; then
  step mutants_hopper_only timeout 200 python3 -m blockattn mutants --jobs 4 --tolerances v5 \
    --baseline ci/baselines/h100/report.json --out "$r/mutants_hopper_only" \
    --mutant hopper-rows-past-block-not-zeroed --mutant hopper-box-at-head-0 \
    --mutant hopper-fwd-scale-missing --mutant hopper-bwd-log2e-missing
else
  step pytest_hopper env BLOCKATTN_KERNEL_PATH=hopper timeout 200 python3 -m pytest -n 8 -q -p no:cacheprovider \
    tests/kernels/test_hopper_path.py tests/kernels/test_attention.py::test_empty_input \
    tests/reliability/test_nonfinite.py::test_empty_batches_give_empty_outputs
  step stages timeout 150 python3 benchmarks/stage_profile.py --out "$r/stages" --head-dims 128
  step mutants timeout 300 python3 -m blockattn mutants --jobs 12 --tolerances v5 \
    --baseline ci/baselines/h100/report.json --out "$r/mutants"
fi
tar czf "$out/hopper-$phase.tgz" -C "$r" . 2>/dev/null
cp "$r/steps.log" "$out/steps-$phase.log"
