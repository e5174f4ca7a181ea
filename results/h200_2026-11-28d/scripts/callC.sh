#!/usr/bin/env bash
# session 24, call C: the gate's cost after the write-sealed answers (no copy-out, determinism
# compared in host memory), alternated rounds on one warm GPU with a bytecode cache for both
# trees (PYTHONPYCACHEPREFIX): 3a073fd (old/, no isolation) `gate` against HEAD `gate --fuzz 0`;
# then `contract` old/new; then false alarms (blockattn, fa2; every distribution) in 4 lanes.
# Usage (in the export): bash callC.sh   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
LIMIT=${LIMIT:-560}
OLD="env BLOCKATTN_GIT_COMMIT=3a073fd PYTHONPATH=$PWD/old"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
t() { local d=$1; shift; local a=$(date +%s.%N); (cd $d && "$@") > /dev/null 2>&1; local rc=$?; echo "$(python3 -c "print(f'{$(date +%s.%N)-$a:.2f}')") rc=$rc"; }
G="--no-progress"; [ -n "${DRY:-}" ] && G="--no-progress --max-cases 1"
ROUNDS=${ROUNDS:-3}
rm -rf /tmp/go[AB]* /tmp/gn[AB]* /tmp/warm_* /tmp/co[0-9]* /tmp/cn[0-9]* /tmp/pyc /tmp/fa*
export PYTHONPYCACHEPREFIX=/tmp/pyc; unset PYTHONDONTWRITEBYTECODE
round() {  # round TAG I
  echo "$1 round $2 gate old          $(t old $OLD python3 -m blockattn gate $G --out /tmp/go$1$2)" | tee -a $R/timing.log
  echo "$1 round $2 gate new --fuzz 0 $(t . env BLOCKATTN_ISOLATION_COSTS=$R/costs_gate_$1$2.json python3 -m blockattn gate --fuzz 0 $G --out /tmp/gn$1$2)" | tee -a $R/timing.log
}
s "warm (bytecode cache)"
(cd old && $OLD python3 -m blockattn gate $G --out /tmp/warm_old > $R/warm_old.log 2>&1) &
python3 -m blockattn gate --fuzz 0 $G --out /tmp/warm_new > $R/warm_new.log 2>&1
wait
for k in 1 2; do echo "import torch (bytecode cache) $(t . python3 -c 'import torch')" | tee -a $R/timing.log; done
s "rounds B (bytecode cache)"
for i in $(seq 1 $ROUNDS); do [ $(( $(date +%s) - T0 )) -gt $(( LIMIT - 300 )) ] && break; round B $i; done
s "contract B"
for i in 1 2; do
  [ $(( $(date +%s) - T0 )) -gt $(( LIMIT - 260 )) ] && break
  echo "B round $i contract old      $(t old $OLD python3 -m blockattn contract --out /tmp/co$i)" | tee -a $R/timing.log
  echo "B round $i contract new      $(t . python3 -m blockattn contract --out /tmp/cn$i)" | tee -a $R/timing.log
done
cp /tmp/gnB1/gate.md $R/gate_new.md 2>&1 | tee -a $L
grep -h "PASS\|FAIL" /tmp/gnB1/gate.md | head -3 >> $L
s "false alarms"
END=$((T0 + LIMIT))
lane() {
  local seed=$((${FA_FIRST:-24000} + $1)) nc=""
  [ "$1" != 0 ] && nc="--no-corpus"
  while [ $(( END - $(date +%s) )) -gt 50 ]; do
    ( time timeout $(( END - $(date +%s) )) python3 -m blockattn false-alarms --seeds 1 \
        --first-seed $seed --every-distribution --providers blockattn,fa2 --tolerances v5 $nc \
        --no-progress --out $R/fa_$seed ) > $R/fa_$seed.log 2>&1
    echo "seed $seed exit $? at +$(( $(date +%s) - T0 ))s" >> $R/fa_lanes.log
    seed=$((seed + 4)); nc="--no-corpus"
  done
}
[ -n "${DRY:-}" ] || { for k in 0 1 2 3; do lane $k & done; wait; }
s done
tar -czf $OUT/callC.tar.gz -C $OUT r && rm -rf $R
