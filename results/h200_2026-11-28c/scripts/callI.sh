#!/usr/bin/env bash
# session 23, call I: the whole GPU test tier at HEAD (`pytest -m "not slow"`, -n 16, verbose so a
# cut run still names what ran), then GPU false alarms in lanes of seeds with the time left.
# Usage (in the export): bash callI.sh   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
s tier
SEL=${SEL:-}
( time timeout ${TIER_S:-490} python3 -m pytest -v -n ${NW:-16} -m "not slow" -p no:cacheprovider -rfE --durations=25 $SEL ) > $R/tier.log 2>&1
echo "tier exit $?" | tee -a $L
grep -E "^(FAILED|ERROR)|passed|failed" $R/tier.log | tail -15 | tee -a $L
pkill -9 -f "blockattn.run.worker"; sleep 1
s false_alarms
END=$((T0 + ${FA_END:-560}))
lane() {
  local seed=$((${FA_FIRST:-23000} + $1)) nc=""
  [ "$1" != 0 ] && nc="--no-corpus"
  while [ $(( END - $(date +%s) )) -gt 50 ]; do
    ( time timeout $(( END - $(date +%s) )) python3 -m blockattn false-alarms --seeds 1 \
        --first-seed $seed --every-distribution --providers blockattn,fa2 --tolerances v5 $nc \
        --no-progress --out $R/fa_$seed ) > $R/fa_$seed.log 2>&1
    echo "seed $seed exit $? at +$(( $(date +%s) - T0 ))s" >> $R/fa_lanes.log
    seed=$((seed + 4)); nc="--no-corpus"
  done
}
[ -n "${DRY:-}" ] || { for k in 0 1 2 3; do lane $k & done; wait; }
s done
tar -czf $OUT/callI.tar.gz -C $OUT r && rm -rf $R
