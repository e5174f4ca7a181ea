#!/usr/bin/env bash
# GPU checks of the contract (issue 20, part 3): FA4 as a built-in provider, the battery with
# its option, stream and layout probes on every GPU provider, the gate's cost, a re-blessed
# H100 baseline over corpus v2, the GPU test tier, mutants and false alarms.
#   phase a: stash the first half of the FA4 wheels (.gpu/fa4a, carried) in /tmp/stash
#   phase b: finish the FA4 install (.gpu/fa4b, carried) into /tmp/site; the battery for
#            blockattn, fa2, eager and fa4; `run --provider fa4` over the corpus; the H100
#            baseline over corpus v2; the gate with and without the battery, each twice (the
#            second of each pair has a warm Triton cache); a bench of blockattn, fa2 and fa4
#   phase c: the GPU test tier; the false-alarm run (20 seeds, every distribution)
#   phase d: every mutant against the H100 baseline
#   phase e (after phase a): FA4 again; the bench with fa4 among the core providers; the GPU
#            tests fixed after phase c (the streams probe's cleanup, the plugin's counts)
#   phase f: after the trust work (issue 21): the GPU test tier again, and every mutant
# Usage: bash benchmarks/gpu_contract.sh a|b|c|d|e|f OUTDIR [COMMIT]
# How the FA4 wheels were fetched and split: results/h100_2026-11-25/README.md.
set -uo pipefail
phase=$1
out=${2:-$OUT}
export BLOCKATTN_GIT_COMMIT=${3:-unknown}  # the device copy has no usable .git
r=/tmp/contract
mkdir -p "$r" "$out" /tmp/stash
if [ "$phase" = a ]; then
  cp .gpu/fa4a/* /tmp/stash/ && ls -la /tmp/stash | tee "$out/stash.log"
  exit 0
fi
source "$(dirname "$0")/gpu_steps.sh"  # step NAME CMD..., env.log
step install python3 -m pip install -q --no-deps --no-build-isolation -e .
if [ "$phase" = b ] || [ "$phase" = e ]; then
  cp .gpu/fa4b/* /tmp/stash/
  cat /tmp/stash/cu13.part.* > /tmp/stash/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
  rm -f /tmp/stash/cu13.part.*
  # only what the machine lacks: its own cuda-bindings / protobuf win when present
  python3 -c "import cuda.bindings" 2>/dev/null && rm -f /tmp/stash/cuda_bindings* /tmp/stash/cuda_pathfinder*
  python3 -c "import google.protobuf" 2>/dev/null && rm -f /tmp/stash/protobuf*
  step fa4_install python3 -m pip install -q --no-deps --target /tmp/site /tmp/stash/*.whl
  export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
  step fa4_import python3 -c "import importlib.metadata as m, flash_attn.cute; print('flash-attn-4', m.version('flash-attn-4'), 'cutlass-dsl', m.version('nvidia-cutlass-dsl'))"
fi
if [ "$phase" = e ]; then
  step contract_fa4 timeout 150 python3 -m blockattn contract --provider fa4 --tolerances v5 \
    --out "$r/contract_fa4"
  step bench timeout 200 python3 -m blockattn bench --providers blockattn,fa2,fa4 \
    --out "$r/bench" --no-sweeps --time-budget-s 180 --gpu-kind nvidia-h100-x1
  step pytest_fixed timeout 200 python3 -m pytest -n 8 -q -p no:cacheprovider tests/contract \
    tests/plugin tests/harness/test_selection.py tests/harness/test_provenance.py
elif [ "$phase" = b ]; then
  for p in blockattn fa2 eager fa4; do
    step "contract_$p" timeout 150 python3 -m blockattn contract --provider "$p" \
      --tolerances v5 --out "$r/contract_$p"
  done
  step run_fa4 timeout 200 python3 -m blockattn run --provider fa4 --corpus-only \
    --tolerances v5 --out "$r/run_fa4" --no-progress
  step bless_h100 timeout 120 python3 -m blockattn run --providers blockattn,fa2,eager \
    --corpus-only --tolerances v5 --out "$r/baseline_h100" --no-progress --no-contract
  for i in 1 2; do
    step "gate_no_contract_$i" timeout 150 python3 -m blockattn gate --tolerances v5 \
      --out "$r/gate_without_$i" --no-progress --no-contract
    step "gate_with_contract_$i" timeout 150 python3 -m blockattn gate --tolerances v5 \
      --out "$r/gate_with_$i" --no-progress
  done
  step bench timeout 100 python3 -m blockattn bench --providers blockattn,fa2,fa4 \
    --out "$r/bench" --no-sweeps --time-budget-s 80 --gpu-kind nvidia-h100-x1
elif [ "$phase" = f ]; then
  step pytest_gpu timeout 330 python3 -m pytest -n 8 -m "not slow" -q -p no:cacheprovider
  step mutants timeout 240 python3 -m blockattn mutants --jobs 12 --tolerances v5 \
    --baseline ci/baselines/h100/report.json --out "$r/mutants"
elif [ "$phase" = c ]; then
  step pytest_gpu timeout 300 python3 -m pytest -n 8 -m "not slow" -q -p no:cacheprovider
  step false_alarms timeout 260 python3 -m blockattn false-alarms --tolerances v5 --seeds 20 \
    --fuzz 2 --every-distribution --profile gpu --out "$r/false_alarms" --no-progress
else
  step mutants timeout 500 python3 -m blockattn mutants --jobs 12 --tolerances v5 \
    --baseline ci/baselines/h100/report.json --out "$r/mutants"
fi
tar czf "$out/contract-$phase.tgz" -C "$r" . 2>/dev/null
cp "$r/steps.log" "$out/steps-$phase.log"
