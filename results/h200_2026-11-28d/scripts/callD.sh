#!/usr/bin/env bash
# session 24, call D: the survivor of call B (isolation-dead-worker-calls-sent-again) against its
# new test on the GPU: the test on the unmodified tree (its control), then the mutant alone.
set -uo pipefail
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
RT=tests/redteam/test_redteam.py
( time timeout 200 python3 -m pytest -p no:cacheprovider -rfE -q $RT::test_a_worker_found_dead_is_read_before_it_is_replaced $RT::test_a_crash_fails_its_own_case_only ) > $R/tests.log 2>&1
echo "tests rc $?" >> $R/tests.log
BASE=ci/baselines/h200/report.json; [ -n "${DRY:-}" ] && BASE=ci/baselines/cpu/report.json
( time timeout 200 python3 -m blockattn mutants --mutant isolation-dead-worker-calls-sent-again --no-control --fuzz 0 --jobs 1 --tolerances v5 --baseline $BASE --out $R/mout ) > $R/mutant.log 2>&1
echo "mutant rc $?" >> $R/mutant.log
tail -5 $R/tests.log; grep -h "isolation-dead" $R/mout/mutants.md
tar -czf $OUT/callD.tar.gz -C $OUT r
