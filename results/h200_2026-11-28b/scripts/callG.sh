#!/usr/bin/env bash
# session 22, call G: the gate's and the battery's cost, alternated rounds, warm caches: 3a073fd
# (old/, no isolation) `gate` and `contract` against HEAD `gate --fuzz 0`, `contract` (isolated)
# and `contract --in-process`; one isolated `contract` under cProfile; then the five tests call F
# found failing on the GPU tier. Usage (in the export): bash callG.sh   [DRY=1: CPU shell check]
set -uo pipefail
R=$OUT/r; mkdir -p $R; L=$R/steps.log
s() { echo "== $1 $(date -u +%T) +$(( $(date +%s) - T0 ))s" | tee -a $L; }
T0=$(date +%s)
OLD="env BLOCKATTN_GIT_COMMIT=3a073fd PYTHONPATH=$PWD/old"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt 2>&1
[ -n "${DRY:-}" ] || python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/install.log 2>&1
# t DIR CMD...: run CMD in DIR, print seconds and rc
t() { local d=$1; shift; local a=$(date +%s.%N); (cd $d && "$@") > /dev/null 2>&1; local rc=$?; echo "$(python3 -c "print(f'{$(date +%s.%N)-$a:.2f}')") rc=$rc"; }
G="--no-progress"; [ -n "${DRY:-}" ] && G="--no-progress --max-cases 1"
s warm
(cd old && $OLD python3 -m blockattn gate $G --out /tmp/warm_old > $R/warm_old.log 2>&1) &
python3 -m blockattn gate --fuzz 0 $G --out /tmp/warm_new > $R/warm_new.log 2>&1
wait
s rounds
for i in 1 2 3 4; do
  [ $(( $(date +%s) - T0 )) -gt 250 ] && break
  echo "round $i gate old          $(t old $OLD python3 -m blockattn gate $G --out /tmp/go$i)" | tee -a $R/timing.log
  echo "round $i gate new --fuzz 0 $(t . env BLOCKATTN_ISOLATION_COSTS=$R/costs_gate_$i.json python3 -m blockattn gate --fuzz 0 $G --out /tmp/gn$i)" | tee -a $R/timing.log
  echo "round $i contract old      $(t old $OLD python3 -m blockattn contract --out /tmp/co$i)" | tee -a $R/timing.log
  echo "round $i contract new      $(t . env BLOCKATTN_ISOLATION_COSTS=$R/costs_contract_$i.json python3 -m blockattn contract --out /tmp/cn$i)" | tee -a $R/timing.log
  echo "round $i contract new inp  $(t . python3 -m blockattn contract --in-process --out /tmp/ci$i)" | tee -a $R/timing.log
done
for x in go1/gate gn1/gate co1/contract cn1/contract ci1/contract; do cp /tmp/$x.md $R/$(dirname $x).md 2>&1 | tee -a $L; done
s profile
echo "contract new under cProfile $(t . python3 -m cProfile -o $R/contract_iso.prof -m blockattn contract --out /tmp/cp)" | tee -a $R/timing.log
s tests
timeout 150 python3 -m pytest -q -n 5 -p no:cacheprovider -rfE tests/ci/test_cli_reference.py tests/harness/test_baseline_compat.py tests/reliability/test_fail_closed.py tests/test_bench_ceilings.py "tests/redteam/test_redteam.py::test_hang_fails_its_case_and_the_run_goes_on" > $R/tests.log 2>&1; echo "tests rc=$?" | tee -a $L
tail -4 $R/tests.log | tee -a $L
s done
tar -czf $OUT/callG.tar.gz -C $OUT r && rm -rf $R
