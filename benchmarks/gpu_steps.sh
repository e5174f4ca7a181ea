# Sourced by the benchmarks/gpu_*.sh session scripts: one device call runs several steps, each
# timed and logged under $r, none able to stop the others. Either set $r (a log folder) before
# sourcing, or call start_run OUTDIR COMMIT after it (logs in OUTDIR/run, tarred by finish_run).
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
log_env() {  # the GPU, torch/triton versions, date, the copy's (stale) commit: $r/env.log
  { nvidia-smi -L; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; \
    date -u; git rev-parse --short HEAD 2>/dev/null; } > "$r/env.log" 2>&1
  cat "$r/env.log"
}
start_run() {  # start_run OUTDIR COMMIT: $out, $r = OUTDIR/run, env.log, the package installed
  out=$1
  export BLOCKATTN_GIT_COMMIT=$2  # the device copy has no usable .git
  r=$out/run
  mkdir -p "$r"
  log_env
  step install python3 -m pip install -q --no-deps --no-build-isolation -e .
}
finish_run() {  # one archive of $out/run (the device returns a handful of files per call)
  tar -czf "$out/run.tgz" -C "$out" run
}
if [ -n "${r:-}" ]; then log_env; fi  # scripts that set $r before sourcing
checks() {  # checks BASELINE [MUTANTS_TIMEOUT_S]: every mutant against BASELINE (journaled in
  # $r/mutants: --resume continues it), then the false alarms (tolerances v5)
  step mutants timeout "${2:-300}" python3 -m blockattn mutants --jobs 14 --tolerances v5 \
    --baseline "$1" --out "$r/mutants"
  step false_alarms timeout 200 python3 -m blockattn false-alarms --tolerances v5 --seeds 8 \
    --fuzz 2 --every-distribution --profile gpu --out "$r/false_alarms"
}
suite() {  # suite BASELINE: the GPU tier, then checks BASELINE
  step pytest_gpu timeout 420 python3 -m pytest -n 12 -m "not slow" -q -p no:cacheprovider
  checks "$1"
}
mutant_args_for() {  # mutant_args_for FILE: "--mutant NAME" for each catalog mutant planted in FILE
  python3 -c "import sys
from blockattn.mutants import catalog
print(' '.join('--mutant ' + m.name for m in catalog.MUTANTS if m.file.endswith(sys.argv[1])))" "$1"
}
