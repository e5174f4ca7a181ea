#!/usr/bin/env bash
# session 25, call D: the replayed-answer GPU test alone (its failure shows the row), then one
# bench of blockattn and the fast mode at P_D128 and P_D64.
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
s "replay test"
( time timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/redteam/test_redteam_gpu.py -k replayed ) > $R/replay.log 2>&1
echo "replay exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
tail -6 $R/replay.log >> $L
s "bench"
timeout $(( ${END_S:-250} - ($(date +%s) - T0) )) python3 -m blockattn bench --cases P_D128,P_D64 --no-sweeps --no-extras --no-projection --providers blockattn,blockattn_rotary --provider blockattn_fast --out $R/bench > $R/bench.log 2>&1
echo "bench exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
s done
tar -czf $OUT/callD.tar.gz -C $OUT r && rm -rf $R
