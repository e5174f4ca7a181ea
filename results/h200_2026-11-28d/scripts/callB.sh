#!/usr/bin/env bash
# session 24, call B: the GPU mutants of the isolation and contract groups at HEAD (journal in
# mout/, resumable), beside `BLOCKATTN_KERNEL_PATH=prefer-hopper blockattn gate --tolerances v5`
# (cold Triton cache). Usage (in the export): bash callB.sh   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
NAMES=$(python3 -c "
from blockattn.mutants import catalog
print(' '.join('--mutant ' + m.name for m in catalog.by_name(None) if m.group in ('isolation','contract')))")
echo "$NAMES" | wc -w >> $L
BASE=ci/baselines/h100/report.json; nvidia-smi -L 2>/dev/null | grep -q H200 && BASE=ci/baselines/h200/report.json
RES=""; [ -f mout/mutants.journal.jsonl ] && RES="--resume"
EXTRA=""; [ -n "${DRY:-}" ] && { NAMES="--mutant $(echo $NAMES | awk '{print $2}')"; EXTRA="--fuzz 0"; BASE=ci/baselines/cpu/report.json; }
s "mutants + prefer-hopper gate"
( time timeout $((${MUT_END:-540} - ($(date +%s) - T0))) python3 -m blockattn mutants $NAMES --jobs ${JOBS:-12} --tolerances v5 --baseline $BASE --out mout $RES $EXTRA ) > $R/mutants.log 2>&1 &
MP=$!
PH=""; [ -n "${DRY:-}" ] && PH="--max-cases 1 --fuzz 0"
( time BLOCKATTN_KERNEL_PATH=prefer-hopper timeout ${PH_S:-400} python3 -m blockattn gate --tolerances v5 --no-progress $PH --out $R/gate_ph ) > $R/gate_prefer_hopper.log 2>&1
echo "prefer-hopper gate exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
wait $MP
echo "mutants exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
tail -5 $R/mutants.log >> $L
[ -n "${DRY:-}" ] || { pkill -9 -f "blockattn mutants"; pkill -9 -f "blockattn.mutants"; pkill -9 -f "blockattn.run.worker"; sleep 1; }
cp -r mout $R/mout
s done
tar -czf $OUT/callB.tar.gz -C $OUT r && rm -rf $R
