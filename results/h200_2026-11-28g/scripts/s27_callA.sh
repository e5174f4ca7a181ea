#!/usr/bin/env bash
# session 27, call A (working tree = HEAD 27ce29b + async MMAs in the plain Gluon backward):
# the Gluon path's GPU tests on the working tree (bitwise equal to the portable kernel, both
# chain counts), then same-run A/Bs: plain bwd async MMAs (.ab/b2) vs HEAD (.ab/a), at the
# shipped chains and at one chain forced (the H100's D128 kernel); the fast rotary slot-major
# patch (.ab/slot) vs HEAD.   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
git diff --stat > $R/tree_diff.txt 2>&1; git diff > $R/tree.patch 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
s "gluon tests"
[ -n "${DRY:-}" ] || ( timeout 150 python3 -m pytest -n 8 -q -p no:cacheprovider -rfE tests/kernels/test_gluon_path.py tests/kernels/test_gluon_rotary.py ) > $R/gluon_tests.log 2>&1
echo "gluon tests exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L; tail -3 $R/gluon_tests.log >> $L
ab() { local name=$1; shift; s "ab $name"
  [ -n "${DRY:-}" ] || timeout ${AB_S:-110} python3 benchmarks/ab_kernels.py --a .ab/a --out $R/ab_$name "$@" > $R/ab_$name.log 2>&1
  echo "ab $name exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L; tail -14 $R/ab_$name.log >> $L; }
ab async_plain --b .ab/b2 --rotary off --dims 64,128 --dtypes bf16,fp16 --rounds 5 --rep-ms 100
BLOCKATTN_GLUON_CHAINS=1 ab async_1chain --b .ab/b2 --rotary off --dims 128,64 --rounds 3 --rep-ms 100
ab slot_major --b .ab/slot --precision fast --rotary on --rounds 3 --rep-ms 100
s done
