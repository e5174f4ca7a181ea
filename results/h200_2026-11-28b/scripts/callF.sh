#!/usr/bin/env bash
# session 22, call F: the gate's and the battery's cost, alternated rounds, warm caches: 3a073fd
# (old/, no isolation) `gate` and `contract` against HEAD `gate --fuzz 0` and `contract`
# (isolated) and `contract --in-process`; then the GPU test tier at HEAD, verbose.
# Usage (in the export): bash callF.sh
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
t() { local a=$(date +%s.%N); "$@" > /dev/null 2>&1; local rc=$?; echo "$(python3 -c "print(f'{$(date +%s.%N)-$a:.2f}')") rc=$rc"; }
old() { (cd old && env BLOCKATTN_GIT_COMMIT=3a073fd PYTHONPATH=$PWD "$@"); }
s warm
old python3 -m blockattn gate --no-progress --out /tmp/warm_old > $R/warm_old.log 2>&1 &
python3 -m blockattn gate --fuzz 0 --no-progress --out /tmp/warm_new > $R/warm_new.log 2>&1
wait
s rounds
for i in 1 2 3 4; do
  [ $(( $(date +%s) - T0 )) -gt 230 ] && break
  echo "round $i gate old          $(old t python3 -m blockattn gate --no-progress --out /tmp/go$i)" | tee -a $R/timing.log
  echo "round $i gate new --fuzz 0 $(t env BLOCKATTN_ISOLATION_COSTS=$R/costs_gate_$i.json python3 -m blockattn gate --fuzz 0 --no-progress --out /tmp/gn$i)" | tee -a $R/timing.log
  echo "round $i contract old      $(old t python3 -m blockattn contract --out /tmp/co$i)" | tee -a $R/timing.log
  echo "round $i contract new      $(t env BLOCKATTN_ISOLATION_COSTS=$R/costs_contract_$i.json python3 -m blockattn contract --out /tmp/cn$i)" | tee -a $R/timing.log
  echo "round $i contract new inp  $(t python3 -m blockattn contract --in-process --out /tmp/ci$i)" | tee -a $R/timing.log
done
cp /tmp/gn1/gate.md $R/gate_new.md; cp /tmp/go1/gate.md $R/gate_old.md; cp /tmp/cn1/contract.md $R/contract_new.md; cp /tmp/co1/contract.md $R/contract_old.md
s tier
timeout $(( 575 - ($(date +%s) - T0) )) python3 -m pytest -v -n 16 -p no:cacheprovider -m "not slow" --durations=40 > $R/tier.log 2>&1; echo "tier rc=$?" | tee -a $L
grep -E "FAILED|ERROR" $R/tier.log | head -20 | tee -a $L
tail -3 $R/tier.log | tee -a $L
s done
tar -czf $OUT/callF.tar.gz -C $OUT r && rm -rf $R
