#!/usr/bin/env bash
# session 28, call B (clean export of HEAD): triage of call A's sanitizer findings.
# (1) the whole ci/sanitize.sh again (a failing variant no longer stops the run);
# (2) the bs=128 variants, whose rotary forward gave a non-finite O under memcheck only:
#     ten plain runs, three memcheck runs, initcheck (reads of uninitialised global memory);
# (3) the two-chain kernel's racecheck hazards: full hazard report (addresses, threads), synccheck.
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
s "sanitize"
[ -n "${DRY:-}" ] || ( SANITIZE_TIMEOUT_S=150 timeout 400 bash ci/sanitize.sh $R/sanitize ) > $R/sanitize_stdout.log 2>&1
echo "sanitize exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L; cat $R/sanitize/summary.md >> $L 2>/dev/null
G128="'bs': 128"
s "bs128 plain x10"
for i in $(seq 10); do timeout 60 python3 ci/sanitize_kernels.py --grep "$G128" 2>&1 | grep -E "FAIL|launched"; done > $R/bs128_plain.log 2>&1
sort $R/bs128_plain.log | uniq -c >> $L
s "bs128 memcheck x3"
for i in 1 2 3; do timeout 60 $CS --tool memcheck --leak-check no --report-api-errors no python3 ci/sanitize_kernels.py --grep "$G128" 2>&1 | grep -E "FAIL|launched|SUMMARY"; done > $R/bs128_memcheck.log 2>&1
sort $R/bs128_memcheck.log | uniq -c >> $L
s "initcheck (base variants)"
timeout 120 $CS --tool initcheck --print-limit 20 python3 ci/sanitize_kernels.py > $R/initcheck.log 2>&1
echo "initcheck exit $?" | tee -a $L; grep -E "FAIL|launched|SUMMARY" $R/initcheck.log >> $L
G2="bfloat16', 'D': 128, 'rotary': False.*two chains"
s "racecheck report all (two chains bf16 D128)"
timeout 90 $CS --tool racecheck --racecheck-report all --print-limit 0 python3 ci/sanitize_kernels.py --sweep --grep "$G2" > $R/racecheck_all.log 2>&1
echo "racecheck exit $?" | tee -a $L; grep -E "SUMMARY" $R/racecheck_all.log >> $L
s "synccheck (sweep)"
timeout 90 $CS --tool synccheck python3 ci/sanitize_kernels.py --sweep --grep "gluon" > $R/synccheck.log 2>&1
echo "synccheck exit $?" | tee -a $L; grep -E "FAIL|launched|SUMMARY" $R/synccheck.log >> $L
s done
tar -czf $OUT/callB.tar.gz -C $OUT r && rm -rf $R
