#!/usr/bin/env bash
# FA4 beside blockattn and FA v2 in `blockattn bench` runs on a GPU machine without internet
# (../shared/fa4-on-device.md). Device calls started back to back (an idle machine goes after
# ~30 s, /tmp with it); the working tree (~22 MB) and what a call carries share 64 MiB, so the
# 92 MB nvidia-cutlass-dsl-libs-cu13 wheel goes as `split -b 40M` parts xaa, xab, xac:
#   calls 1, 2: bash benchmarks/gpu_fa4_bench.sh stash .whl/a, then .whl/a2 (carry that folder,
#           holding xaa, then xab; copied to /tmp/stash)
#   last call: bash benchmarks/gpu_fa4_bench.sh bench OUTDIR COMMIT [RUNS]   (carry .whl/b: xac,
#           cu13.sha (its sha256) and the other wheels): joins and checks the wheel, installs
#           them under /tmp/site, then RUNS (default 3) benches of blockattn, fa2, fa4, archiving
#           $OUT/run after each so that a run cut short by the time limit still returns its logs
set -uo pipefail
if [ "$1" = stash ]; then
  mkdir -p /tmp/stash && cp "$2"/* /tmp/stash/ && ls -la /tmp/stash
  exit
fi
source "$(dirname "$0")/gpu_steps.sh"
start_run "$2" "$3"
cp .whl/b/*.whl .whl/b/x?? /tmp/stash/
cat /tmp/stash/x?? > /tmp/stash/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
(cd /tmp/stash && sha256sum nvidia_cutlass_dsl_libs_cu13-*.whl | cut -c1-64 | cmp - "$OLDPWD/.whl/b/cu13.sha") \
  || { echo "cu13 wheel: sha256 mismatch"; finish_run; exit 1; }
step fa4_install python3 -m pip install -q --no-deps --target /tmp/site /tmp/stash/*.whl
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
step fa4_import python3 -c "import importlib.metadata as m, flash_attn.cute; print('flash-attn-4', \
m.version('flash-attn-4'), 'cutlass-dsl', m.version('nvidia-cutlass-dsl'))"
finish_run
for i in $(seq 1 "${4:-3}"); do
  step "bench_$i" timeout 120 python3 -m blockattn bench --providers blockattn,fa2,fa4 \
    --out "$r/bench_$i" --no-sweeps --no-projection --time-budget-s 100
  finish_run
done
python3 benchmarks/bench_medians.py "$r"/bench_[0-9] > "$r/medians.md" 2>&1
cat "$r/medians.md"
finish_run
