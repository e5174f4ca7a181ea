#!/usr/bin/env bash
# session 27, call B (working tree = 27ce29b + async MMAs + _bwd_kernel_lean, the H200's D64
# default): the Gluon path's GPU tests (lean included), then same-run A/Bs against HEAD (.ab/a):
# the tree's kernels (.ab/b3) at D64 and D128, bf16 and fp16; lean forced at D64 vs the staged
# one-chain kernel is the first A/B's D64 row.   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader > $R/gpu.txt 2>&1
git diff --stat > $R/tree_diff.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
s "gluon tests"
[ -n "${DRY:-}" ] || ( timeout 150 python3 -m pytest -n 8 -q -p no:cacheprovider -rfE tests/kernels/test_gluon_path.py tests/kernels/test_gluon_rotary.py ) > $R/gluon_tests.log 2>&1
echo "gluon tests exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L; tail -3 $R/gluon_tests.log >> $L
ab() { local name=$1; shift; s "ab $name"
  [ -n "${DRY:-}" ] || timeout ${AB_S:-150} python3 benchmarks/ab_kernels.py --a .ab/a --out $R/ab_$name "$@" > $R/ab_$name.log 2>&1
  echo "ab $name exit $? at +$(( $(date +%s) - T0 ))s" | tee -a $L; grep -o '"dtype": "[a-z0-9]*", "D": [0-9]*\|"kernel": "[a-z]*"\|"B_apart_from_A": [0-9]*\|"A_ms": [0-9.]*\|"B_ms": [0-9.]*\|"B_over_A": [0-9.]*\|"B_pct_ceiling": [0-9.]*' $R/ab_$name.log | paste -sd' ' | sed 's/"dtype"/\n"dtype"/g' >> $L; }
ab lean_d64 --b .ab/b3 --rotary off --dims 64 --dtypes bf16,fp16 --rounds 7 --rep-ms 100
ab tree_d128 --b .ab/b3 --rotary off --dims 128 --dtypes bf16 --rounds 3 --rep-ms 100
s done
