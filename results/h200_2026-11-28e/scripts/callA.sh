#!/usr/bin/env bash
# session 25, call A: the whole GPU test tier at HEAD, alone on the machine (cold Triton cache),
# one log line per test as it ends (BLOCKATTN_WORKER_LOG), so a cut run still shows its times.
# Usage (in the export): bash callA.sh   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
SEL=""; [ -n "${DRY:-}" ] && SEL="tests/redteam/test_wire.py"
s "tier"
( time BLOCKATTN_WORKER_LOG=$R/wlog timeout ${TIER_S:-555} python3 -m pytest -n ${N:-16} -m "not slow" -q -p no:cacheprovider -rfE --durations=40 $SEL ) > $R/tier.log 2>&1
echo "tier exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
tail -3 $R/tier.log >> $L
[ -n "${DRY:-}" ] || { pkill -9 -f "blockattn.run.worker"; pkill -9 -f pytest; }
s done
tar -czf $OUT/callA.tar.gz -C $OUT r && rm -rf $R
