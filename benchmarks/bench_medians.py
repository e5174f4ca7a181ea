"""Medians over several `blockattn bench` runs of one call (same GPU): per (case, provider,
pass), the runs' ms, their median, the median's % of the median copy ceiling, and each
fused-rotary entry's median over the plain kernel's as it is and over the plain kernel of its
own precision (accurate or fast; same run set).

    python benchmarks/bench_medians.py RUN_DIR... [--cases P_D128,...] > medians.md
    (each RUN_DIR has bench.json)

A run whose bench.json is missing, of another GPU kind, or that errored is an error here (no
median over fewer runs than asked), and so is an entry measured in only some runs. `--cases`
takes the medians of those cases only (e.g. the cases every run finished before it was cut;
the header names the runs that were cut)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    cases: set[str] | None = None
    if "--cases" in argv:
        k = argv.index("--cases")
        cases = set(argv[k + 1].split(",")) if k + 1 < len(argv) else set()
        argv = argv[:k] + argv[k + 2 :]
    dirs = argv
    if len(dirs) < 2 or cases == set():
        print("usage: bench_medians.py RUN_DIR RUN_DIR [...] [--cases NAME,...]",
              file=sys.stderr)  # fmt: skip
        return 2
    runs = []
    for d in dirs:
        p = Path(d, "bench.json")
        if not p.is_file():
            print(f"bench_medians: {p} is missing", file=sys.stderr)
            return 1
        runs.append(json.loads(p.read_text()))
    kinds = {r["meta"]["gpu_kind"] for r in runs}
    if len(kinds) != 1:
        print(f"bench_medians: runs of different GPU kinds {sorted(kinds)}", file=sys.stderr)
        return 1
    bad = [d for d, r in zip(dirs, runs, strict=True) if r.get("errors")]
    if bad:
        print(f"bench_medians: runs with errors: {bad}", file=sys.stderr)
        return 1
    tbps = [r["ceiling"]["tbps"] for r in runs]
    ceiling = statistics.median(tbps)
    rows: dict[tuple, list] = {}
    nbytes: dict[tuple, int] = {}
    for r in runs:
        for m in r["measurements"]:
            if m.get("status") != "ok" or m.get("group") != "main":
                continue
            if cases is not None and m["case"] not in cases:
                continue
            key = (m["case"], m["provider"], m["pass"])
            rows.setdefault(key, []).append(m["ms"])
            nbytes[key] = m["bytes"]
    meta = runs[0]["meta"]
    cut = [str(k + 1) for k, r in enumerate(runs) if r.get("status", "complete") != "complete"]
    print(f"{meta['gpu']} ({meta['gpu_kind']}), commit {meta['git']['commit']}, "
          f"{len(runs)} runs; copy ceilings TB/s: {[round(t, 3) for t in tbps]}"
          + (f"; cases {', '.join(sorted(cases))} only" if cases is not None else "")
          + (f"; runs cut before the end: {', '.join(cut)}" if cut else "") + "\n")
    missing = sorted((cases or set()) - {c for c, _, _ in rows})
    if missing:
        print(f"bench_medians: cases {missing} measured in no run", file=sys.stderr)
        return 1
    print("| case | provider | pass | ms per run | median ms | % of median ceiling |")
    print("|---|---|---|---|---:|---:|")
    med = {}
    for key in sorted(rows):
        ms = rows[key]
        if len(ms) != len(runs):
            print(f"bench_medians: {key} measured in {len(ms)} of {len(runs)} runs",
                  file=sys.stderr)
            return 1
        med[key] = statistics.median(ms)
        pct = 100 * nbytes[key] / (med[key] * 1e-3) / (ceiling * 1e12)
        print(f"| {' | '.join(key)} | {' / '.join(f'{x:.3f}' for x in ms)} | "
              f"{med[key]:.3f} | {pct:.1f} |")
    ratios = [(c, med[(c, "blockattn_rotary", "bwd")] / med[(c, "blockattn", "bwd")])
              for (c, p, s) in sorted(med) if p == "blockattn_rotary" and s == "bwd"
              and (c, "blockattn", "bwd") in med]
    if ratios:
        print("\nfused rotary bwd / plain bwd (medians): "
              + ", ".join(f"{c} {x:.2f}x" for c, x in ratios))
    _rotary_table(med)
    return 0


# Issue 44 item 1: each fused-rotary entry against the plain kernel as it is (blockattn) and
# against the plain kernel of its own precision (accurate: blockattn; fast: blockattn_fast),
# so a ratio cannot be bought by rounding the non-rotary work.
ROTARY = {"blockattn_rotary": "blockattn", "blockattn_rotary_fast": "blockattn_fast",
          "blockattn_rotary_fast_tbl16": "blockattn_fast"}  # fmt: skip


def _rotary_table(med: dict[tuple, float]) -> None:
    rows = []
    for (c, p, s), ms in sorted(med.items()):
        same = ROTARY.get(p)
        if same is None or (c, "blockattn", s) not in med:
            continue
        as_is = ms / med[(c, "blockattn", s)]
        own = f"{ms / med[(c, same, s)]:.3f}" if (c, same, s) in med else "-"
        rows.append(f"| {c} | {s} | {p} | {ms:.3f} | {as_is:.3f} | {own} |")
    if rows:
        print("\n| case | pass | fused rotary | median ms | / plain as is | / plain of its "
              "precision |\n|---|---|---|---:|---:|---:|")
        print("\n".join(rows))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
