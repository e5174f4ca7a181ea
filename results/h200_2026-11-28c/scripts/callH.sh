#!/usr/bin/env bash
# session 23, call H: the gate's cost, alternated rounds on one warm GPU: 3a073fd (old/, no
# isolation) `gate` against HEAD `gate --fuzz 0`; first as the machine comes (no bytecode cache),
# then with a bytecode cache for both trees (PYTHONPYCACHEPREFIX, written on the warm-up runs):
# the usual state of an installed Python. Then `contract` old/new in the second setting.
# Usage (in the export): bash callH.sh   [DRY=1: a CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
LIMIT=${LIMIT:-540}
OLD="env BLOCKATTN_GIT_COMMIT=3a073fd PYTHONPATH=$PWD/old"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
# t DIR CMD...: run CMD in DIR, print seconds and rc
t() { local d=$1; shift; local a=$(date +%s.%N); (cd $d && "$@") > /dev/null 2>&1; local rc=$?; echo "$(python3 -c "print(f'{$(date +%s.%N)-$a:.2f}')") rc=$rc"; }
G="--no-progress"; [ -n "${DRY:-}" ] && G="--no-progress --max-cases 1"
ROUNDS=${ROUNDS:-3}
rm -rf /tmp/go[AB]* /tmp/gn[AB]* /tmp/warm_* /tmp/co[0-9]* /tmp/cn[0-9]* /tmp/pyc
s env
{ env | grep -i '^python' ; python3 -c "import sys; print('dont_write_bytecode', sys.flags.dont_write_bytecode, 'prefix', sys.pycache_prefix, sys.version)";
  python3 -c "import torch, os; d=os.path.dirname(torch.__file__); print('torch dir writable', os.access(d, os.W_OK), 'pycache there', os.path.isdir(os.path.join(d,'__pycache__')))";
  nproc; } > $R/env.txt 2>&1
for k in 1 2; do echo "import torch (as it comes) $(t . python3 -c 'import torch')" | tee -a $R/timing.log; done
round() {  # round TAG I
  echo "$1 round $2 gate old          $(t old $OLD python3 -m blockattn gate $G --out /tmp/go$1$2)" | tee -a $R/timing.log
  echo "$1 round $2 gate new --fuzz 0 $(t . env BLOCKATTN_ISOLATION_COSTS=$R/costs_gate_$1$2.json python3 -m blockattn gate --fuzz 0 $G --out /tmp/gn$1$2)" | tee -a $R/timing.log
}
s "warm (as it comes)"
(cd old && $OLD python3 -m blockattn gate $G --out /tmp/warm_old > $R/warm_old.log 2>&1) &
python3 -m blockattn gate --fuzz 0 $G --out /tmp/warm_new > $R/warm_new.log 2>&1
wait
s "rounds A (no bytecode cache)"
for i in $(seq 1 $ROUNDS); do [ $(( $(date +%s) - T0 )) -gt $(( LIMIT - 200 )) ] && break; round A $i; done
export PYTHONPYCACHEPREFIX=/tmp/pyc; unset PYTHONDONTWRITEBYTECODE
s "warm (bytecode cache)"
(cd old && $OLD python3 -m blockattn gate $G --out /tmp/warm_old2 > $R/warm_old2.log 2>&1) &
python3 -m blockattn gate --fuzz 0 $G --out /tmp/warm_new2 > $R/warm_new2.log 2>&1
wait
for k in 1 2; do echo "import torch (bytecode cache) $(t . python3 -c 'import torch')" | tee -a $R/timing.log; done
s "rounds B (bytecode cache)"
for i in $(seq 1 $ROUNDS); do [ $(( $(date +%s) - T0 )) -gt $(( LIMIT - 60 )) ] && break; round B $i; done
s "contract B"
for i in 1 2; do
  [ $(( $(date +%s) - T0 )) -gt $(( LIMIT - 40 )) ] && break
  echo "B round $i contract old      $(t old $OLD python3 -m blockattn contract --out /tmp/co$i)" | tee -a $R/timing.log
  echo "B round $i contract new      $(t . python3 -m blockattn contract --out /tmp/cn$i)" | tee -a $R/timing.log
done
for x in goA1/gate gnA1/gate; do cp /tmp/$x.md $R/$(dirname $x).md 2>&1 | tee -a $L; done
grep -h "PASS\|FAIL" /tmp/gnA1/gate.md | head -3 >> $L
s done
tar -czf $OUT/callH.tar.gz -C $OUT r && rm -rf $R
