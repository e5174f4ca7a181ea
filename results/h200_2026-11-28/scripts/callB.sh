#!/usr/bin/env bash
# session 21, call B: the red team on the GPU (tests/redteam), then the GPU mutants (core, rotary, precision, isolation groups), with
# the journal in mout/ (carried back in for the second call: --resume runs only the rest).
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
NAMES=$(python3 -c "
from blockattn.mutants import catalog
print(' '.join('--mutant ' + m.name for m in catalog.by_name(None) if m.group in ('core','rotary','precision','isolation')))")
BASE=ci/baselines/h100/report.json; nvidia-smi -L | grep -q H200 && BASE=ci/baselines/h200/report.json
RES=""; [ -f mout/mutants.journal.jsonl ] && RES="--resume"
s redteam
( time timeout 180 python3 -m pytest -q -n 8 -p no:cacheprovider -rfEs tests/redteam ) > $R/redteam.log 2>&1
echo "redteam exit $?" >> $L
s mutants
( time timeout $((${MUT_END:-520} - ($(date +%s) - T0))) python3 -m blockattn mutants $NAMES --jobs 14 --tolerances v5 --baseline $BASE --out mout $RES ) > $R/mutants.log 2>&1
echo "mutants exit $?" >> $L; pkill -9 -f "blockattn mutants"; pkill -9 -f "blockattn.mutants"; pkill -9 -f "blockattn.run.worker"; sleep 1
cp -r mout $R/mout
s done
tar -czf $OUT/callB.tar.gz -C $OUT r && rm -rf $R
