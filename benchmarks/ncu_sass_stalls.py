"""Warp-stall samples per SASS instruction from Nsight Compute's source page
(`ncu --import R.ncu-rep --page source --csv --print-source sass > R.sass.csv`, what
`python3 benchmarks/gpu.py ncu` writes): the share of each stall reason, samples and executions
by opcode, and the instructions with most samples (index in the listing, share, executions,
source, top reasons). Markdown-ish text on stdout.

    python benchmarks/ncu_sass_stalls.py A.sass.csv [B.sass.csv ...] > stalls.md
    python benchmarks/ncu_sass_stalls.py A.sass.csv --lines A.sass   # + samples per source line

`--lines` takes the same build's annotated disassembly (`benchmarks/sass_lines.py VARIANT
--sass A.sass`, on CPU: nvdisasm -g puts the source line above each instruction) and sums the
samples per source line. It refuses a disassembly of another build: the instruction count and
every opcode must match the profile's listing.
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys
from pathlib import Path

from sass_lines import opcode, source_lines  # a sibling (this folder is first on sys.path)

_SAMPLES = "Warp Stall Sampling (All Samples)"
_EXECUTED = "Instructions Executed"


def load(path: Path) -> list[dict]:
    """One dict per SASS instruction: src, samples, executed, stall {reason: samples}."""
    with path.open() as f:
        rows = list(csv.reader(f))
    hdr = rows[1]  # row 0 names the kernel
    idx = {h: i for i, h in enumerate(hdr)}
    reasons = {h[len("stall_"):]: i for h, i in idx.items()
               if h.startswith("stall_") and "Not Issued" not in h}
    out = []
    for r in rows[2:]:
        if len(r) < len(hdr):
            continue
        out.append({"src": r[1].strip(), "samples": int(r[idx[_SAMPLES]] or 0),
                    "executed": int(r[idx[_EXECUTED]] or 0),
                    "stall": {k: int(r[i] or 0) for k, i in reasons.items()}})
    return out


def summary(path: Path, top: int) -> str:
    ins = load(path)
    total = sum(d["samples"] for d in ins) or 1
    executed = sum(d["executed"] for d in ins) or 1
    reasons: collections.Counter = collections.Counter()
    for d in ins:
        reasons.update(d["stall"])
    lines = [f"## {path.name}: {len(ins)} SASS instructions, {total} samples, "
             f"{executed} executed (warp-level)", "",
             "stall reasons: " + ", ".join(f"{k} {100 * v / total:.1f} %"
                                           for k, v in reasons.most_common(12)), ""]
    by_op: collections.Counter = collections.Counter()
    ex_op: collections.Counter = collections.Counter()
    for d in ins:
        by_op[opcode(d["src"])] += d["samples"]
        ex_op[opcode(d["src"])] += d["executed"]
    lines += ["by opcode (% of samples / % of executed): " + ", ".join(
        f"{k} {100 * v / total:.1f}/{100 * ex_op[k] / executed:.1f}"
        for k, v in by_op.most_common(25)), "", "```"]
    for n, d in sorted(enumerate(ins), key=lambda x: -x[1]["samples"])[:top]:
        st = sorted(d["stall"].items(), key=lambda x: -x[1])[:3]
        lines.append(f"{n:5d} {100 * d['samples'] / total:5.2f} % x{d['executed']:7d} "
                     f"{d['src'][:60]:60s} " + " ".join(f"{k}={v}" for k, v in st if v))
    return "\n".join([*lines, "```", ""])


def by_line(path: Path, sass: Path, top: int) -> str:
    """Samples summed per source line; ValueError if `sass` is not the profiled build."""
    ins = load(path)
    src = [(op, where or "?") for op, where in source_lines(sass.read_text())]
    if len(src) != len(ins):
        raise ValueError(f"{sass} has {len(src)} instructions, {path} {len(ins)}: another build")
    for n, (d, (op, _)) in enumerate(zip(ins, src, strict=True)):
        if opcode(d["src"]) != op:
            raise ValueError(f"instruction {n}: {path} has {opcode(d['src'])}, {sass} {op}: "
                             "another build")
    total = sum(d["samples"] for d in ins) or 1
    samples: collections.Counter = collections.Counter()
    stalls: dict = collections.defaultdict(collections.Counter)
    for d, (_, where) in zip(ins, src, strict=True):
        samples[where] += d["samples"]
        stalls[where].update(d["stall"])
    lines = [f"## {path.name} by source line ({sass.name})", "",
             "| % of samples | source line | top stall reasons |", "|---:|---|---|"]
    for where, v in samples.most_common(top):
        st = ", ".join(f"{k} {100 * c / total:.1f} %" for k, c in stalls[where].most_common(3)
                       if c)
        lines.append(f"| {100 * v / total:.1f} | {where} | {st} |")
    return "\n".join([*lines, ""])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--lines", type=Path, default=None,
                    help="the build's annotated SASS (sass_lines.py --sass): samples per line")
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args()
    if args.lines and len(args.files) != 1:
        print("ncu_sass_stalls: --lines takes one profile", file=sys.stderr)
        return 2
    for p in args.files:
        print(summary(p, args.top))
    if args.lines:
        try:
            print(by_line(args.files[0], args.lines, args.top))
        except ValueError as exc:
            print(f"ncu_sass_stalls: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
