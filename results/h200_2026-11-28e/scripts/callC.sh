#!/usr/bin/env bash
# session 25, call C: the replayed-answer GPU test alone, then three bench runs (blockattn,
# accurate and fast fused rotary, FA v2) and their medians, at HEAD.
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
s "replay test"
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/redteam/test_redteam_gpu.py -k replayed > $R/replay.log 2>&1
echo "replay exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
tail -2 $R/replay.log >> $L
s "bench"
python3 benchmarks/gpu.py bench --runs 3 --no-install --out $R/gpu --commit "$BLOCKATTN_GIT_COMMIT" > $R/bench_steps.log 2>&1
echo "bench exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
cat $R/gpu/bench_medians.md >> $L 2>/dev/null
s done
tar -czf $OUT/callC.tar.gz -C $OUT r && rm -rf $R
