#!/usr/bin/env bash
# session 25, call B: the whole GPU test tier at HEAD after the OOM and bench-batch fixes,
# alone on the machine (cold Triton cache), one log line per test as it ends; then the new
# bench-batch mutant with its control.
# Usage (in the export): bash callB.sh   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
SEL=""; [ -n "${DRY:-}" ] && SEL="tests/redteam/test_timing_floor.py"
s "tier"
( time BLOCKATTN_WORKER_LOG=$R/wlog timeout ${TIER_S:-450} python3 -m pytest -n ${N:-16} -m "not slow" -q -p no:cacheprovider -rfE --durations=40 $SEL ) > $R/tier.log 2>&1
echo "tier exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
tail -3 $R/tier.log >> $L
[ -n "${DRY:-}" ] || { pkill -9 -f "blockattn.run.worker"; pkill -9 -f "pytest"; }
s "mutant"
timeout ${MUT_S:-110} python3 -m blockattn mutants --mutant isolation-bench-batch-sized-by-its-round-trip --jobs 2 --out $R/mutant > $R/mutant.log 2>&1
echo "mutant exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
grep -E "killed|survived|Control" $R/mutant.log | head -5 >> $L
s done
tar -czf $OUT/callB.tar.gz -C $OUT r && rm -rf $R
