#!/usr/bin/env bash
# session 28, call A (clean export of 37fb21b): the Gluon GPU tests at HEAD (7ac8229's masked
# row-0 read, 271c742's merged kernel, 0ebea59's helpers: none ran on a GPU yet), then
# ci/sanitize.sh with the forced-kernel sweep and the planted memory bugs, then the three
# planted bugs re-anchored since call D of session 27 (v7, the stored H200 baseline).
# Usage (in the export): bash s28_callA.sh   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
s "gluon tests"
[ -n "${DRY:-}" ] || ( timeout 120 python3 -m pytest -n 8 -q -p no:cacheprovider -rfE tests/kernels/test_gluon_path.py tests/kernels/test_gluon_rotary.py ) > $R/gluon_tests.log 2>&1
echo "gluon tests exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L; tail -3 $R/gluon_tests.log >> $L
s "sanitize"
[ -n "${DRY:-}" ] || ( SANITIZE_TIMEOUT_S=150 timeout 420 bash ci/sanitize.sh $R/sanitize ) > $R/sanitize_stdout.log 2>&1
echo "sanitize exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L; cat $R/sanitize/summary.md >> $L 2>/dev/null
[ -n "${DRY:-}" ] || { pkill -9 -f compute-sanitizer; pkill -9 -f sanitize_kernels; sleep 1; }
LEFT=$(( 560 - ($(date +%s) - T0) ))
s "mutants (left ${LEFT}s)"
M=""; for m in gluon-v-uncentred gluon-lean-walks-two-chains gluon-fast-slot-major-one-head; do M="$M --mutant $m"; done
[ -n "${DRY:-}" ] || [ $LEFT -lt 60 ] || ( timeout $LEFT python3 -m blockattn mutants $M --tolerances v7 --baseline ci/baselines/h200/report.json --jobs 4 --out $R/mutants ) > $R/mutants.log 2>&1
echo "mutants exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
grep -E "^\| \`|ontrol" $R/mutants.log >> $L
s done
tar -czf $OUT/callA.tar.gz -C $OUT r && rm -rf $R
