#!/usr/bin/env bash
# session 20, call 4 (ff69199): red team (installed package), the FA2 projection false alarm
# re-checked, false alarms of seed 101 again, then GPU mutants (kernel groups + isolation)
set -uo pipefail
export BLOCKATTN_GIT_COMMIT=ff69199
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T)" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
(cd /tmp && python3 -c "import blockattn; print(blockattn.__file__)") >> $L 2>&1
s redteam
( time timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider -rfEs tests/redteam ) > $R/redteam.log 2>&1
s diag
timeout 90 python3 reduction_diag.py case_s101.jsonl fa2 > $R/reduction_diag.log 2>&1
s fa_s101
( time timeout 120 python3 -m blockattn false-alarms --seeds 1 --first-seed 101 --every-distribution --providers blockattn,fa2 --tolerances v5 --no-progress --out $R/fa ) > $R/false_alarms.log 2>&1
s mutants
NAMES=$(python3 -c "
from blockattn.mutants import catalog
print(' '.join('--mutant ' + m.name for m in catalog.by_name(None) if m.group in ('core','rotary','precision','isolation')))")
BASE=ci/baselines/h100/report.json; nvidia-smi -L | grep -q H200 && BASE=ci/baselines/h200/report.json
LEFT=$((570 - ($(date +%s) - T0)))
( time timeout $LEFT python3 -m blockattn mutants $NAMES --jobs 14 --tolerances v5 --baseline $BASE --out $R/m ) > $R/mutants.log 2>&1
echo "mutants exit $?" >> $L
s done
tar -czf $OUT/call4.tar.gz -C $OUT r && rm -rf $R
