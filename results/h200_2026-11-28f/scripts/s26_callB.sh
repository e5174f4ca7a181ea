#!/usr/bin/env bash
# session 26, call B: the whole GPU test tier at HEAD (longest first in units under xdist's
# loadgroup: a module fixture's tests on one worker), its cost table; then a same-run A/B of the
# fast backward's D64 table move (A = d06df21's kernels in .ab/a, B = HEAD's).
# Usage (in the export): bash s26_callB.sh   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
SEL=""; [ -n "${DRY:-}" ] && SEL="tests/ci/test_xdist_plan.py"
s "tier"
( time BLOCKATTN_WORKER_LOG=$R/wlog timeout ${TIER_S:-380} python3 -m pytest -n ${N:-16} -m "not slow" -q -p no:cacheprovider -rfE --durations=40 $SEL ) > $R/tier.log 2>&1
echo "tier exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
tail -3 $R/tier.log >> $L
python3 ci/xdist_plan.py costs $R/wlog $R/test_costs.json >> $L 2>&1
[ -n "${DRY:-}" ] || { pkill -9 -f "blockattn.run.worker"; pkill -9 -f "pytest"; sleep 2; }
s "ab d64"
[ -n "${DRY:-}" ] || timeout ${AB_S:-120} python3 benchmarks/ab_kernels.py --a .ab/a --out $R/ab_d64 --precision fast --rounds 3 --rep-ms 100 --rotary on > $R/ab_d64.log 2>&1
echo "ab exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
s done
tar -czf $OUT/callB.tar.gz -C $OUT r && rm -rf $R
