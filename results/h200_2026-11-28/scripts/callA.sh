#!/usr/bin/env bash
# session 21, call A: the isolation's cost on a GPU. HEAD (.) isolated and in-process against
# 3a073fd (old/, the issue's "today", no isolation), alternated, warm caches; then the default
# gate with --fuzz 0 (corpus + battery) of both, timed. Usage (in the export): bash callA.sh
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
HEADC=$BLOCKATTN_GIT_COMMIT
s warm
( cd old && env BLOCKATTN_GIT_COMMIT=3a073fd PYTHONPATH=$PWD python3 -m blockattn run --corpus-only --no-progress --out /tmp/warm_old > $R/warm_old.log 2>&1 ) &
python3 -m blockattn run --corpus-only --no-progress --out /tmp/warm_new > $R/warm_new.log 2>&1
wait
python3 -m blockattn run --in-process --corpus-only --no-progress --out /tmp/warm_inp > $R/warm_inp.log 2>&1
s rounds
t() { local a=$(date +%s.%N); "$@" > /dev/null 2>&1; local rc=$?; echo "$(python3 -c "print(f'{$(date +%s.%N)-$a:.2f}')") rc=$rc"; }
for i in 1 2 3 4; do
  [ $(( $(date +%s) - T0 )) -gt 400 ] && break
  echo "round $i old   $(cd old && t env BLOCKATTN_GIT_COMMIT=3a073fd PYTHONPATH=$PWD python3 -m blockattn run --corpus-only --no-progress --out /tmp/old$i)" | tee -a $R/timing.log
  echo "round $i iso   $(t env BLOCKATTN_ISOLATION_COSTS=$R/costs_$i.json python3 -m blockattn run --corpus-only --no-progress --out /tmp/iso$i)" | tee -a $R/timing.log
  echo "round $i inproc $(t python3 -m blockattn run --in-process --corpus-only --no-progress --out /tmp/inp$i)" | tee -a $R/timing.log
done
cp /tmp/iso1/results.jsonl $R/iso1_results.jsonl 2>/dev/null; cp /tmp/old1/results.jsonl $R/old1_results.jsonl 2>/dev/null
s gates
if [ $(( $(date +%s) - T0 )) -lt 470 ]; then
  echo "gate old   $(cd old && t env BLOCKATTN_GIT_COMMIT=3a073fd PYTHONPATH=$PWD python3 -m blockattn gate --no-progress --out /tmp/gate_old)" | tee -a $R/timing.log
  echo "gate new --fuzz 0 $(t python3 -m blockattn gate --fuzz 0 --no-progress --out /tmp/gate_new)" | tee -a $R/timing.log
  [ $(( $(date +%s) - T0 )) -lt 520 ] && echo "gate new default (12 fuzz) $(t python3 -m blockattn gate --no-progress --out /tmp/gate_fz)" | tee -a $R/timing.log
  cp /tmp/gate_old/gate.md $R/gate_old.md 2>/dev/null; cp /tmp/gate_new/gate.md $R/gate_new_fuzz0.md 2>/dev/null
fi
s done
tar -czf $OUT/callA.tar.gz -C $OUT r && rm -rf $R
