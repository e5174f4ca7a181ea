#!/usr/bin/env bash
# The isolation's GPU evidence in one call: `bash ci/isolation_gpu.sh OUT [STEP...]`.
# Steps (default: all): redteam (tests/redteam on the GPU: CUDA fault, side stream, the CPU
# catalog), bench (blockattn, an honest outside wrapper and the side-stream kernel timed in the
# worker at shape P), gate (the default corpus gate isolated, and the same cases in-process by
# `run --in-process`, timed), hopper (BLOCKATTN_KERNEL_PATH=prefer-hopper gate with v5), tiles
# (the Triton tile table against the torch one). BENCH_BUDGET_S (default 400): the bench's budget.
# Logs: OUT/<step>.log; the bench's bench.json under OUT/bench/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: ci/isolation_gpu.sh OUT [STEP...]}; shift
STEPS=${*:-tiles redteam bench gate hopper}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
"$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 || true
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1
step() { echo "== $1 $(date -u +%T)"; }
for s in $STEPS; do
  case $s in
    tiles)
      step tiles
      "$PY" -m pytest -q -p no:cacheprovider tests/kernels/test_tile_table.py >"$OUT/tiles.log" 2>&1 ;;
    redteam)
      step redteam
      ( time "$PY" -m pytest -q -n 6 -p no:cacheprovider -rfEs tests/redteam ) >"$OUT/redteam.log" 2>&1 ;;
    bench)
      step bench
      ( cd tests/redteam && time "$PY" -m blockattn bench --out "$OUT/bench" --no-sweeps \
          --no-extras --no-projection --providers blockattn \
          --provider honest=adversaries:honest --provider honest_msl=adversaries:honest_msl \
          --provider streamy=adversaries:side_stream \
          --time-budget-s "${BENCH_BUDGET_S:-400}" ) >"$OUT/bench.log" 2>&1 ;;
    gate)
      # Warm every kernel first (the battery's too), then alternate in-process and isolated
      # runs of the same cases; BLOCKATTN_ISOLATION_COSTS says where the isolated judge waited.
      # OLD_TREE=DIR (an export of an older commit) adds its isolated run to each round (A/B).
      step gate
      { "$PY" -m blockattn run --corpus-only --no-progress --out /tmp/warm >/dev/null 2>&1
        for i in $(seq 1 "${GATE_ROUNDS:-2}"); do
          echo "## round $i: in-process (run --in-process --corpus-only, battery included)"
          ( time "$PY" -m blockattn run --in-process --corpus-only --no-progress \
            --out /tmp/run_inproc$i ) 2>&1 | tail -3
          echo "## round $i: isolated, same options"
          ( time BLOCKATTN_ISOLATION_COSTS="$OUT/costs_$i.json" "$PY" -m blockattn run \
            --corpus-only --no-progress --out /tmp/run_iso$i ) 2>&1 | tail -3
          if [[ -n "${OLD_TREE:-}" ]]; then
            echo "## round $i: isolated, $OLD_TREE (older commit)"
            ( cd "$OLD_TREE" && time BLOCKATTN_ISOLATION_COSTS="$OUT/costs_old_$i.json" \
              PYTHONPATH="$PWD" "$PY" -m blockattn run --corpus-only --no-progress \
              --out /tmp/run_old$i ) 2>&1 | tail -3
          fi
        done
        echo "## the default gate: corpus + run-time fuzz"
        ( time "$PY" -m blockattn gate --no-progress --out /tmp/gate_fuzz ) 2>&1 | tail -3
        grep -m1 "blockattn gate:" /tmp/gate_fuzz/gate.md; grep -m1 "Cases:" /tmp/gate_fuzz/gate.md
        cp /tmp/gate_fuzz/gate.md "$OUT/gate_default.md"  # the whole verdict, reasons included
      } >"$OUT/gate.log" 2>&1 ;;
    hopper)
      step hopper
      ( time BLOCKATTN_KERNEL_PATH=prefer-hopper "$PY" -m blockattn gate --tolerances v5 \
          --no-progress --out /tmp/gate_hopper ) >"$OUT/hopper.log" 2>&1
      cp /tmp/gate_hopper/gate.md "$OUT/gate_hopper.md" 2>/dev/null ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done
echo "== done $(date -u +%T)"
