#!/usr/bin/env bash
# session 26, call A: the whole GPU test tier at HEAD (longest first by the cost table, one test
# a send), then same-run A/Bs of the fast rotary backward's two prepared patches against HEAD's
# kernels (results/cpu_2026-11-28e/*.patch).
# Usage (in the export, .ab/a = HEAD's kernels): bash s26_callA.sh   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
SEL=""; [ -n "${DRY:-}" ] && SEL="tests/redteam/test_timing_floor.py"
s "tier"
( time BLOCKATTN_WORKER_LOG=$R/wlog timeout ${TIER_S:-300} python3 -m pytest -n ${N:-16} -m "not slow" -q -p no:cacheprovider -rfE --durations=40 $SEL ) > $R/tier.log 2>&1
echo "tier exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
tail -3 $R/tier.log >> $L
[ -n "${DRY:-}" ] || { pkill -9 -f "blockattn.run.worker"; pkill -9 -f "pytest"; sleep 2; }
P=results/cpu_2026-11-28e
for v in table_before_s tables_at_top; do
  s "ab $v"
  GIT_CEILING_DIRECTORIES=$(dirname $PWD) git apply $P/fast_bwd_$v.patch || { echo "apply $v failed" | tee -a $L; continue; }
  { grep -c "_table(SIN" blockattn/kernels/attention_gluon_rotary_fast.py; git diff --no-index --stat .ab/a blockattn/kernels; } >> $L; [ -n "${DRY:-}" ] || timeout ${AB_S:-120} python3 benchmarks/ab_kernels.py --a .ab/a --out $R/ab_$v --precision fast --rounds 3 --rep-ms 100 > $R/ab_$v.log 2>&1
  echo "ab $v exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
  GIT_CEILING_DIRECTORIES=$(dirname $PWD) git apply -R $P/fast_bwd_$v.patch || echo "revert $v failed" | tee -a $L
done
s done
tar -czf $OUT/callA.tar.gz -C $OUT r && rm -rf $R
