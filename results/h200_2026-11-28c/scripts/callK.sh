#!/usr/bin/env bash
# session 23, call K: why the GPU tier's fp32 128-row tile tests failed (their message), and the
# red team's crash tests after 8be8f53 (a worker that hangs up before it dies), on the GPU.
set -uo pipefail
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
T=tests/kernels/test_kernel_paths_tiles.py::test_every_path_runs_or_refuses_at_every_tile_class
RT=tests/redteam/test_redteam.py
( time timeout 230 python3 -m pytest -n 5 -p no:cacheprovider -rfE --durations=8 "$T[portable-128-fp32-64-plain]" "$T[portable-128-fp32-128-plain]" $RT::test_a_crash_fails_its_own_case_only $RT::test_a_worker_that_hangs_up_before_dying_fails_its_own_case_only $RT::test_hang_fails_its_case_and_the_run_goes_on ) > $R/tests.log 2>&1
echo "rc $?" >> $R/tests.log
tail -c 9000 $R/tests.log
tar -czf $OUT/callK.tar.gz -C $OUT r
