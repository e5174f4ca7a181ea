#!/usr/bin/env bash
# session 27, call E (clean export of 308781f): bless the H200 gate baseline under v7 (the
# stored one was judged by v5), then the gate against the new file in the same call.
set -uo pipefail
python3 benchmarks/gpu.py bless gate --out $OUT/g --commit 308781f --tolerances v7 \
  --baseline $OUT/g/baseline/report.json ${DRY:+--dry-run}
cat $OUT/g/steps.log 2>/dev/null; tail -25 $OUT/g/gate.log 2>/dev/null
