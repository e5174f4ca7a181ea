"""Markdown summary of Nsight Compute raw pages (`ncu --import R.ncu-rep --page raw --csv`):
per kernel launch, time, issue rate, tensor-pipe and DRAM use, occupancy limits, instruction
mix per warp per tile, and the warp stall samples by reason.

    python benchmarks/ncu_summary.py --tiles N A.raw.csv [B.raw.csv ...] > summary.md

--tiles: the launch's tiles (grid size when each program runs one tile), to put instruction
counts per warp per tile; warps per tile = block size / 32.
"""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

_METRICS = [
    ("time", "gpu__time_duration.sum"),
    ("issue active, % of peak per scheduler",
     "smsp__issue_active.avg.pct_of_peak_sustained_active"),
    ("cycles between issues per warp", "smsp__average_warp_latency_per_inst_issued.ratio"),
    ("tensor pipe active, % of peak",
     "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
    ("DRAM bytes per second", "dram__bytes.sum.per_second"),
    ("registers", "launch__registers_per_thread"),
    ("dynamic shared memory per CTA (KB)", "launch__shared_mem_per_block_dynamic"),
    ("CTAs per SM, register limit", "launch__occupancy_limit_registers"),
    ("CTAs per SM, shared-memory limit", "launch__occupancy_limit_shared_mem"),
    ("active warps, % of peak", "sm__warps_active.avg.pct_of_peak_sustained_active"),
]
_PER_TILE = [
    ("instructions", "smsp__inst_executed.sum"),
    ("local (spill) loads", "smsp__sass_inst_executed_op_local_ld.sum"),
    ("local (spill) stores", "smsp__sass_inst_executed_op_local_st.sum"),
    ("global loads", "smsp__sass_inst_executed_op_global_ld.sum"),
    ("global stores", "smsp__sass_inst_executed_op_global_st.sum"),
    ("shared loads", "smsp__sass_inst_executed_op_shared_ld.sum"),
    ("shared stores", "smsp__sass_inst_executed_op_shared_st.sum"),
]
_STALL = re.compile(r"smsp__pcsamp_warps_issue_stalled_([a-z_]+)$")


def _num(s: str) -> float:
    return float(s.replace(",", "")) if s else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, required=True)
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args()
    for path in args.files:
        rows = list(csv.reader(path.open()))
        hdr, units = rows[0], dict(zip(rows[0], rows[1], strict=False))
        for i, raw in enumerate(rows[2:]):
            r = dict(zip(hdr, raw, strict=False))
            warps = args.tiles * int(r["Block Size"].strip("()").split(",")[0]) / 32
            print(f"## {path.name}, launch {i + 1}: `{r['Kernel Name']}`, grid {r['Grid Size']}, "
                  f"block {r['Block Size']}\n")
            print("| metric | value |\n|---|---:|")
            for name, key in _METRICS:
                unit = units.get(key, "")
                unit = f" {unit}" if unit and unit not in ("%", "inst", "block") else ""
                print(f"| {name} | {_num(r.get(key, '')):.4g}{unit} |")
            for name, key in _PER_TILE:
                print(f"| {name} per warp per tile | {_num(r.get(key, '')) / warps:.0f} |")
            stalls = {m.group(1): _num(v) for k, v in r.items() if (m := _STALL.match(k))
                      and not k.endswith("_not_issued")}
            total = sum(stalls.values()) or 1.0
            print("\n| stall reason (samples) | share |\n|---|---:|")
            for name, v in sorted(stalls.items(), key=lambda kv: -kv[1])[:10]:
                print(f"| {name} | {100 * v / total:.1f} % |")
            print()


if __name__ == "__main__":
    main()
