#!/usr/bin/env bash
# session 21, call C: the GPU mutants resumed, then false alarms (lanes of seeds) (core, rotary, precision, isolation groups), with
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
# The journal is an H200's: on another GPU a resume is refused, so run only the mutants it lacks,
# without a control (the false alarms below run the unmodified code on this GPU).
if [ -n "$RES" ] && ! nvidia-smi -L | grep -q H200; then
  NAMES=$(python3 -c "
import json
done = {json.loads(l)['outcome']['name'] for l in open('mout/mutants.journal.jsonl') if '\"outcome\"' in l}
from blockattn.mutants import catalog
print(' '.join('--mutant ' + m.name for m in catalog.by_name(None)
               if m.group in ('core','rotary','precision','isolation') and m.name not in done))")
  RES="--no-control"; mv mout mout_h200; mkdir mout; echo "not an H200: $RES, the rest only" >> $L
fi
s mutants
( time timeout $((${MUT_S:-240} - ($(date +%s) - T0))) python3 -m blockattn mutants $NAMES --jobs 14 --tolerances v5 --baseline $BASE --out mout $RES ) > $R/mutants.log 2>&1
echo "mutants exit $?" >> $L; pkill -9 -f "blockattn mutants"; pkill -9 -f "blockattn.mutants"; pkill -9 -f "blockattn.run.worker"; sleep 1
cp -r mout $R/mout; [ -d mout_h200 ] && cp -r mout_h200 $R/
s false_alarms
END=$((T0 + ${FA_END:-500}))
lane() {  # seeds FA_FIRST+k, +4, +8, ...: one run each (a cut run loses only its own seed)
  local seed=$((${FA_FIRST:-21000} + $1)) nc=""
  [ "$1" != 0 ] && nc="--no-corpus"  # the corpus once: lane 0's first run
  while [ $(( END - $(date +%s) )) -gt 60 ]; do
    ( time timeout $(( END - $(date +%s) )) python3 -m blockattn false-alarms --seeds 1 \
        --first-seed $seed --every-distribution --providers blockattn,fa2 --tolerances v5 $nc \
        --no-progress --out $R/fa_$seed ) > $R/fa_$seed.log 2>&1
    echo "seed $seed exit $? at +$(( $(date +%s) - T0 ))s" >> $R/fa_lanes.log
    seed=$((seed + 4)); nc="--no-corpus"
  done
}
for k in 0 1 2 3; do lane $k & done
wait
s done
tar -czf $OUT/callC.tar.gz -C $OUT r && rm -rf $R
