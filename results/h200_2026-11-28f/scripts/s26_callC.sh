#!/usr/bin/env bash
# session 26, call C: the fast model's GPU campaign before releasing v7: false alarms over 20
# fresh seeds (every distribution, corpus once) and the fast mode's planted bugs, both under v7.
# Usage (in the export): bash s26_callC.sh   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
TOL="--tolerances ${TOLF:-v7} --allow-unreleased-tolerances"
s "mutants"
timeout ${MUT_S:-200} python3 -m blockattn mutants --mutant fast-fwd-ignored --mutant fast-bwd-ignored \
  --mutant fast-p-rounded-in-ds --mutant fast-dp-rounded --mutant gluon-fast-dp-rounded $TOL \
  --jobs 6 --out $R/mutants > $R/mutants.log 2>&1
echo "mutants exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
grep -E "killed|survived|ontrol" $R/mutants.log | head -12 >> $L
s "false alarms"
timeout ${FA_S:-300} python3 -m blockattn false-alarms $TOL --providers blockattn_fast \
  --seeds ${SEEDS:-20} --first-seed 33000 --fuzz 2 --every-distribution --profile gpu \
  --out $R/false_alarms --no-progress > $R/false_alarms.log 2>&1
echo "false alarms exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
tail -5 $R/false_alarms.log >> $L
s done
tar -czf $OUT/callC.tar.gz -C $OUT r && rm -rf $R
