#!/usr/bin/env bash
# session 28, call C (clean export of HEAD): (1) triage of the bs-128 bf16 D64 rotary forward
# that is non-finite under memcheck only (triage_bs128.py: NaN-poisoned allocator x20 without
# the sanitizer; memcheck as shipped, without its register cap, unchunked); (2) the whole GPU
# tier at HEAD (its kernels last ran whole at 308781f).
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
s "poison x20 (no sanitizer)"
timeout 90 python3 triage_bs128.py poison > $R/poison.log 2>&1; tail -2 $R/poison.log >> $L
for m in as-is nocap chunks1; do
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 python3 triage_bs128.py $m > $R/warm_$m.log 2>&1
  for i in 1 2; do
    s "memcheck $m #$i"
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 $CS --tool memcheck --leak-check no --report-api-errors no python3 triage_bs128.py $m > $R/memcheck_${m}_$i.log 2>&1
    grep -E "non-finite|calls,|SUMMARY|config now" $R/memcheck_${m}_$i.log >> $L
  done
done
[ -n "${DRY:-}" ] || { pkill -9 -f compute-sanitizer; sleep 1; }
LEFT=$(( 560 - ($(date +%s) - T0) ))
s "tier (left ${LEFT}s)"
SEL=""; [ -n "${DRY:-}" ] && SEL="tests/redteam/test_timing_floor.py"
( time BLOCKATTN_WORKER_LOG=$R/wlog timeout $LEFT python3 -m pytest -n 16 -m "not slow" -q -p no:cacheprovider -rfE --durations=30 $SEL ) > $R/tier.log 2>&1
echo "tier exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
tail -4 $R/tier.log >> $L
s done
tar -czf $OUT/callC.tar.gz -C $OUT r && rm -rf $R
