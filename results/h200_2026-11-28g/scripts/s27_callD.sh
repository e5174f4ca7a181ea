#!/usr/bin/env bash
# session 27, call D (clean export of 308781f): the six planted bugs whose code changed, judged
# as the GPU mutant campaigns are (v7, the stored H200 baseline: its elementwise regressions
# too); then three `blockattn bench` runs and their medians (benchmarks/gpu.py bench).
# Usage (in the export): bash s27_callD.sh   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
s "mutants"
M=""; for m in gluon-dv-p-lo-dropped gluon-v-uncentred gluon2-dp-v-lo-dropped gluon2-second-chain-repeats-first gluon-lean-walks-two-chains gluon-fast-slot-major-one-head; do M="$M --mutant $m"; done
[ -n "${DRY:-}" ] || ( timeout ${MUT_S:-120} python3 -m blockattn mutants $M --tolerances v7 --baseline ci/baselines/h200/report.json --jobs 6 --out $R/mutants ) > $R/mutants.log 2>&1
echo "mutants exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
grep -E "^\| \`|ontrol" $R/mutants.log >> $L
s "bench"
DR=""; [ -n "${DRY:-}" ] && DR="--dry-run"
python3 benchmarks/gpu.py bench --out $R/g --commit 308781f --no-install $DR > $R/gpu_py.log 2>&1
echo "bench exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
cat $R/g/steps.log >> $L 2>/dev/null; cat $R/g/bench_medians.md >> $L 2>/dev/null
s done
tar -czf $OUT/callD.tar.gz -C $OUT r && rm -rf $R
