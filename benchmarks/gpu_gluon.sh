#!/usr/bin/env bash
# GPU work on the Gluon backward (issue 23), one device call per phase.
#   phase a: its own tests (the kernel judged on sm_90); the A/B against the portable backward
#            with a programs-per-SM axis; the whole not-slow tier with
#            BLOCKATTN_KERNEL_PATH=prefer-gluon (every backward it can run goes through it)
#   phase b: the whole not-slow tier by default (auto: the Gluon backward at D = 128); every
#            mutant (the Gluon ones included) against the H100 baseline
#   phase c: the whole not-slow tier again (420 s); false alarms (8 seeds, every
#            distribution, with prefer-gluon)
#   phase d: the bench (blockattn, fa2); the stage profile at D = 128
#   phase h: on an H200: its own tests, the A/B, the bench, the stage profile
#   phase w: its own tests (one and two chains per CTA); the A/B with the two-chain kernel
#   phase x: every mutant (the two-chain ones included); the not-slow tier with prefer-gluon and
#            BLOCKATTN_GLUON_CHAINS=2 (the two-chain kernel at every head dim)
#   phase y: on an H200: the not-slow tier by default (the two-chain kernel at D = 128); the
#            bench
#   phase z: the stage profile at D = 128; false alarms with prefer-gluon (on an H200: the
#            two-chain kernel at D = 128)
#   phase r: the opt-in Gluon fused-rotary backward (attention_gluon_rotary): its own tests; the
#            A/B against the default rotary backward (and .ab/a's module when carried); its six
#            mutants (H200 baseline); the stage profile with prefer-gluon (what ran this
#            session in six calls, results/h200_2026-11-26e/)
# Usage: bash benchmarks/gpu_gluon.sh a|b|c|d|h|w|x|y|z|r OUTDIR [COMMIT]
set -uo pipefail
phase=$1
out=${2:-$OUT}
export BLOCKATTN_GIT_COMMIT=${3:-unknown}  # the device copy has no usable .git
r=$out
mkdir -p "$r"
source "$(dirname "$0")/gpu_steps.sh"
step install python3 -m pip install -q --no-deps --no-build-isolation -e .
if [ "$phase" = a ]; then
  step gluon_tests timeout 150 python3 -m pytest -q -x tests/kernels/test_gluon_path.py -p no:cacheprovider
  step ab timeout 200 python3 benchmarks/ab_gluon.py --out "$r/ab" --programs-per-sm 1,2 --rounds 2
  step pytest_prefer_gluon env BLOCKATTN_KERNEL_PATH=prefer-gluon timeout 330 python3 -m pytest \
    -n 8 -m "not slow" -q -p no:cacheprovider
fi
if [ "$phase" = b ]; then  # (its pytest step ran out of its 300 s at ~95 %: phase c re-runs it)
  step pytest_gpu timeout 300 python3 -m pytest -n 8 -m "not slow" -q -p no:cacheprovider
  step mutants timeout 280 python3 -m blockattn mutants --jobs 12 --tolerances v5 \
    --baseline ci/baselines/h100/report.json --out "$r/mutants"
fi
if [ "$phase" = c ]; then
  step pytest_gpu timeout 420 python3 -m pytest -n 8 -m "not slow" -q -p no:cacheprovider
  step false_alarms env BLOCKATTN_KERNEL_PATH=prefer-gluon timeout 170 python3 -m blockattn \
    false-alarms --tolerances v5 --seeds 8 --fuzz 2 --every-distribution --profile gpu \
    --out "$r/false_alarms" --no-progress
fi
if [ "$phase" = d ]; then
  step bench timeout 230 python3 -m blockattn bench --providers blockattn,fa2 --out "$r/bench" \
    --no-sweeps --time-budget-s 200
  step stages timeout 100 python3 benchmarks/stage_profile.py --out "$r/stages" --head-dims 128
fi
if [ "$phase" = h ]; then
  step gluon_tests timeout 100 python3 -m pytest -q -x tests/kernels/test_gluon_path.py -p no:cacheprovider
  step ab timeout 150 python3 benchmarks/ab_gluon.py --out "$r/ab" --rounds 2
  step bench timeout 230 python3 -m blockattn bench --providers blockattn,fa2 --out "$r/bench" \
    --no-sweeps --time-budget-s 200
  step stages timeout 100 python3 benchmarks/stage_profile.py --out "$r/stages" --head-dims 128
fi
if [ "$phase" = w ]; then
  step gluon_tests timeout 150 python3 -m pytest -q -x tests/kernels/test_gluon_path.py -p no:cacheprovider
  step ab timeout 200 python3 benchmarks/ab_gluon.py --out "$r/ab" --chains 2 --dtypes bf16 \
    --rounds 2
fi
if [ "$phase" = x ]; then
  step mutants timeout 280 python3 -m blockattn mutants --jobs 12 --tolerances v5 \
    --baseline ci/baselines/h100/report.json --out "$r/mutants"
  step pytest_two_chains env BLOCKATTN_KERNEL_PATH=prefer-gluon BLOCKATTN_GLUON_CHAINS=2 \
    timeout 300 python3 -m pytest -n 8 -m "not slow" -q -p no:cacheprovider
fi
if [ "$phase" = y ]; then
  step pytest_gpu timeout 300 python3 -m pytest -n 8 -m "not slow" -q -p no:cacheprovider
  step bench timeout 230 python3 -m blockattn bench --providers blockattn,fa2 --out "$r/bench" \
    --no-sweeps --time-budget-s 200
fi
if [ "$phase" = z ]; then
  step stages timeout 100 python3 benchmarks/stage_profile.py --out "$r/stages" --head-dims 128
  step false_alarms env BLOCKATTN_KERNEL_PATH=prefer-gluon timeout 200 python3 -m blockattn \
    false-alarms --tolerances v5 --seeds 8 --fuzz 2 --every-distribution --profile gpu \
    --out "$r/false_alarms" --no-progress
fi
if [ "$phase" = r ]; then
  step rotary_tests timeout 150 python3 -m pytest -q tests/kernels/test_gluon_rotary.py -p no:cacheprovider
  a_arg=()
  [ -f .ab/a/attention_gluon_rotary.py ] && a_arg=(--a .ab/a)
  step ab timeout 200 python3 benchmarks/ab_gluon_rotary.py --out "$r/ab" --rounds 3 --rep-ms 100 \
    "${a_arg[@]}"
  # shellcheck disable=SC2046  # one word per argument
  step mutants timeout 420 python3 -m blockattn mutants $(mutant_args_for attention_gluon_rotary.py) \
    --jobs 7 --tolerances v5 --baseline ci/baselines/h200/report.json --out "$r/mutants"
  step stages timeout 150 python3 benchmarks/stage_profile.py --out "$r/stages" --path prefer-gluon \
    --head-dims 128,64
fi
