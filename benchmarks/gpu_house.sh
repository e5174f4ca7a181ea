#!/usr/bin/env bash
# GPU checks after the house move (issue 22): nothing may behave differently. Each phase fits one
# device call; logs land in OUTDIR/house-<phase>.tgz plus OUTDIR/steps-<phase>.log.
#   phase 1: the GPU test tier; the bench (every provider's timings, now declared by the
#            providers themselves) on the main shapes; a short claims audit; the corpus judged
#            with every GPU provider, sdpa_cudnn (now a provider) included
#   phase 2: every mutant against the H100 baseline, control included; the false-alarm run
#            over 20 seeds and every distribution
#   phase 3 (issue 20): the contract battery for blockattn, fa2 and eager; the gate's wall time
#            with and without the battery; the GPU test tier
#   phase 4 (issue 20): every mutant (contract group included); the false-alarm run with block
#            sizes in the fuzz space
# Usage: bash benchmarks/gpu_house.sh 1|2 OUTDIR [COMMIT]
set -uo pipefail
phase=$1
out=${2:-$OUT}
export BLOCKATTN_GIT_COMMIT=${3:-unknown}  # the device copy has no usable .git
r=/tmp/house
mkdir -p "$r" "$out"
source "$(dirname "$0")/gpu_steps.sh"  # step NAME CMD..., env.log
step install python3 -m pip install -q --no-deps --no-build-isolation -e .
if [ "$phase" = 1 ]; then
  step pytest_gpu timeout 330 python3 -m pytest -n 8 -m "not slow" -q -p no:cacheprovider
  step bench timeout 150 python3 -m blockattn bench --out "$r/bench" --no-sweeps \
    --time-budget-s 120 --gpu-kind nvidia-h100-x1
  step audit timeout 120 python3 -m blockattn audit --quick --seeds 1 --shape-scale 0.25 \
    --out "$r/audit"
  step run_all_providers timeout 120 python3 -m blockattn run --corpus-only --tolerances v5 \
    --providers blockattn,fa2,sdpa_cudnn,eager --out "$r/run_providers" --no-progress
elif [ "$phase" = 3 ]; then
  for p in blockattn fa2 eager; do
    step "contract_$p" timeout 120 python3 -m blockattn contract --under-test "$p" \
      --tolerances v5 --out "$r/contract_$p"
  done
  step gate_with_contract timeout 150 python3 -m blockattn gate --tolerances v5 \
    --out "$r/gate_with" --no-progress
  step gate_no_contract timeout 150 python3 -m blockattn gate --tolerances v5 \
    --out "$r/gate_without" --no-progress --no-contract
  step pytest_gpu timeout 300 python3 -m pytest -n 8 -m "not slow" -q -p no:cacheprovider
else
  step mutants timeout 330 python3 -m blockattn mutants --jobs 12 --tolerances v5 \
    --baseline ci/baselines/h100/report.json --out "$r/mutants"
  step false_alarms timeout 250 python3 -m blockattn false-alarms --tolerances v5 --seeds 20 \
    --fuzz 2 --every-distribution --profile gpu --out "$r/false_alarms" --no-progress
fi
tar czf "$out/house-$phase.tgz" -C "$r" . 2>/dev/null
cp "$r/steps.log" "$out/steps-$phase.log"
