#!/usr/bin/env bash
# session 22, call E: where the GPU gate's time goes (HEAD vs 3a073fd in old/), the red team and
# the GPU test tier at HEAD. Usage (in the export): bash callE.sh
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
t() { local a=$(date +%s.%N); "$@" > /dev/null 2>&1; local rc=$?; echo "$(python3 -c "print(f'{$(date +%s.%N)-$a:.2f}')") rc=$rc"; }
s warm
( cd old && env BLOCKATTN_GIT_COMMIT=3a073fd PYTHONPATH=$PWD python3 -m blockattn gate --no-progress --out /tmp/warm_old > $R/warm_old.log 2>&1 ) &
python3 -m blockattn gate --fuzz 0 --no-progress --out /tmp/warm_new > $R/warm_new.log 2>&1
wait
s profiles
echo "gate old   $(cd old && t env BLOCKATTN_GIT_COMMIT=3a073fd PYTHONPATH=$PWD python3 -m cProfile -o $R/gate_old.prof -m blockattn gate --no-progress --out /tmp/gate_old)" | tee -a $R/timing.log
echo "gate new --fuzz 0 $(t env BLOCKATTN_ISOLATION_COSTS=$R/costs_gate.json python3 -m cProfile -o $R/gate_new.prof -m blockattn gate --fuzz 0 --no-progress --out /tmp/gate_new)" | tee -a $R/timing.log
echo "contract new inproc $(t python3 -m cProfile -o $R/contract_inp.prof -m blockattn contract --in-process --out /tmp/ct_inp)" | tee -a $R/timing.log
echo "contract new iso $(t env BLOCKATTN_ISOLATION_COSTS=$R/costs_contract.json python3 -m blockattn contract --out /tmp/ct_iso)" | tee -a $R/timing.log
echo "contract old $(cd old && t env BLOCKATTN_GIT_COMMIT=3a073fd PYTHONPATH=$PWD python3 -m blockattn contract --out /tmp/ct_old)" | tee -a $R/timing.log
for d in gate_old gate_new ct_inp ct_iso ct_old; do mkdir -p $R/$d; cp /tmp/$d/*.md /tmp/$d/results.jsonl /tmp/$d/run.json $R/$d/ 2>/dev/null; done
s redteam
timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider tests/redteam > $R/redteam.log 2>&1; echo "redteam rc=$?" | tee -a $L
s tier
timeout $(( 585 - ($(date +%s) - T0) )) python3 -m pytest -q -n 12 -p no:cacheprovider -m "not slow" > $R/tier.log 2>&1; echo "tier rc=$?" | tee -a $L
tail -3 $R/tier.log | tee -a $L
s done
tar -czf $OUT/callE.tar.gz -C $OUT r && rm -rf $R
