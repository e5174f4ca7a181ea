#!/usr/bin/env bash
# session 27, call F (HEAD 4d82289): A/B of the lean kernel at D128 (two CTAs per SM, .ab/lean128)
# against the shipped two-chain kernel (.ab/a), plain bwd, bf16 and fp16.
set -uo pipefail
python3 -m pip install -q --no-deps --no-build-isolation -e . > /dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader
timeout 200 python3 benchmarks/ab_kernels.py --a .ab/a --b .ab/lean128 --out $OUT/ab_lean128 --rotary off --dims 128 --dtypes bf16,fp16 --rounds 5 --rep-ms 100 > $OUT/ab_lean128.log 2>&1
echo "exit $?"
grep -o '"dtype": "[a-z0-9]*", "D": [0-9]*\|"kernel": "[a-z]*"\|"B_apart_from_A": [0-9]*\|"A_ms": [0-9.]*\|"B_ms": [0-9.]*\|"B_over_A": [0-9.]*' $OUT/ab_lean128.log | paste -sd' ' | sed 's/"dtype"/\n"dtype"/g'
