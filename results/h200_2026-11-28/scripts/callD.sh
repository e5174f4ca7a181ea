#!/usr/bin/env bash
# session 21, call D (5464604): the three mutants that survived call C's H200 run, with their
# new probes (control: default and portable paths), beside the red team on the GPU.
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
BASE=ci/baselines/h100/report.json; nvidia-smi -L | grep -q H200 && BASE=ci/baselines/h200/report.json
s start
( time timeout 330 python3 -m pytest -q -n 4 -p no:cacheprovider -rfEs tests/redteam ) > $R/redteam.log 2>&1 &
( time timeout 340 python3 -m blockattn mutants --mutant isolation-repeats-answer-the-first-call \
    --mutant fast-p-rounded-in-ds --mutant fast-dp-rounded --jobs 3 --tolerances v5 \
    --baseline $BASE --out $R/m ) > $R/mutants.log 2>&1
echo "mutants exit $?" >> $L
wait
s done
tar -czf $OUT/callD.tar.gz -C $OUT r && rm -rf $R
