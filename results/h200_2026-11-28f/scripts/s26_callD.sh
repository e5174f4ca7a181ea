#!/usr/bin/env bash
# session 26, call D: the last five seeds of the fast model's GPU false-alarm campaign (33015-
# 33019, corpus done in call C), then three bench runs of blockattn, the accurate fused rotary
# and the fast mode at P_D128 / P_D64 and their medians.
# Usage (in the export): bash s26_callD.sh   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
s "false alarms"
timeout ${FA_S:-150} python3 -m blockattn false-alarms --tolerances v7 --allow-unreleased-tolerances \
  --providers blockattn_fast --seeds 5 --first-seed 33015 --no-corpus --fuzz 2 --every-distribution \
  --profile gpu --out $R/false_alarms --no-progress > $R/false_alarms.log 2>&1
echo "false alarms exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
tail -6 $R/false_alarms.log >> $L
[ -n "${DRY:-}" ] && exit 0
for i in 1 2 3; do
  s "bench $i"
  left=$(( ${END_S:-420} - ($(date +%s) - T0) ))
  timeout $(( left / (4 - i) )) python3 -m blockattn bench --cases P_D128,P_D64 --no-sweeps --no-extras \
    --no-projection --providers blockattn,blockattn_rotary --provider blockattn_fast \
    --out $R/bench_$i > $R/bench_$i.log 2>&1
  echo "bench $i exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L
done
python3 benchmarks/bench_medians.py $R/bench_1 $R/bench_2 $R/bench_3 > $R/bench_medians.md 2>> $L
s done
tar -czf $OUT/callD.tar.gz -C $OUT r && rm -rf $R
