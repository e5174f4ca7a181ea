#!/usr/bin/env bash
# session 27, call C (clean export of 308781f): the whole GPU test tier (judge-files red team,
# the lean kernel, async MMAs, the fast slot-major order), then the six planted bugs whose code
# changed: the four re-anchored Gluon mutants and the two new ones, under v7.
# Usage (in the export): bash s27_callC.sh   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
SEL=""; [ -n "${DRY:-}" ] && SEL="tests/redteam/test_timing_floor.py"
s "tier"
( time BLOCKATTN_WORKER_LOG=$R/wlog timeout ${TIER_S:-370} python3 -m pytest -n ${N:-16} -m "not slow" -q -p no:cacheprovider -rfE --durations=40 $SEL ) > $R/tier.log 2>&1
echo "tier exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
tail -3 $R/tier.log >> $L
[ -n "${DRY:-}" ] || { pkill -9 -f "blockattn.run.worker"; pkill -9 -f "pytest"; sleep 2; }
s "mutants"
M=""; for m in gluon-dv-p-lo-dropped gluon-v-uncentred gluon2-dp-v-lo-dropped gluon2-second-chain-repeats-first gluon-lean-walks-two-chains gluon-fast-slot-major-one-head; do M="$M --mutant $m"; done
[ -n "${DRY:-}" ] || ( timeout ${MUT_S:-170} python3 -m blockattn mutants $M --tolerances v7 --jobs 6 --out $R/mutants ) > $R/mutants.log 2>&1
echo "mutants exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
tail -15 $R/mutants.log >> $L
s done
tar -czf $OUT/callC.tar.gz -C $OUT r && rm -rf $R
