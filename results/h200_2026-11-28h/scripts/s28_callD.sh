#!/usr/bin/env bash
# session 28, call D (clean export of HEAD): ci/sanitize.sh end to end as shipped (the racecheck
# triage and the summary's verdicts had only run on canned logs).
set -uo pipefail
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
( time SANITIZE_TIMEOUT_S=100 timeout 290 bash ci/sanitize.sh $R/sanitize ) > $R/sanitize_stdout.log 2>&1
echo "sanitize exit $?" >> $R/sanitize_stdout.log
tar -czf $OUT/callD.tar.gz -C $OUT r && rm -rf $R
