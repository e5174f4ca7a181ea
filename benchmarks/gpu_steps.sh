# Sourced by the benchmarks/gpu_*.sh session scripts: one device call runs several steps, each
# timed and logged under $r, none able to stop the others. Needs $r (a log folder) set first.
export PYTHONUNBUFFERED=1
step() {  # step NAME CMD...: run, time, log; never stop the session on a failing step
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name: $*" | tee -a "$r/steps.log"
  "$@" > "$r/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$r/steps.log"
  tail -4 "$r/$name.log"
}
{ nvidia-smi -L; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; \
  date -u; git rev-parse --short HEAD 2>/dev/null; } > "$r/env.log" 2>&1
cat "$r/env.log"
