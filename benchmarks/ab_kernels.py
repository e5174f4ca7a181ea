"""A/B timing of two versions of the kernels in one run (same GPU, same inputs, same copy
ceiling): the working tree's blockattn/kernels (B) against a saved copy of that folder (A), e.g.
the last commit's, to measure what a kernel change costs.

    mkdir -p .ab/a && git archive HEAD blockattn/kernels | tar -x -C .ab/a --strip-components 2
    python benchmarks/ab_kernels.py --a .ab/a --out DIR [--dtypes bf16,fp16] [--rounds 3]
        [--precision fast]
    # .ab is git-ignored: carry it

Shape P (B=1152, max_len=4096, sparsity 0.7, H=4) at D=128 and D=64, plain and rotary, fwd and
bwd; medians of triton.testing.do_bench (`--rounds` of them, A and B alternating: the median is
reported); the copy ceiling measured in the same run. B's outputs are compared with A's:
elements beyond 1 ulp + 2^-16 of the tensor's largest magnitude apart, and non-finite.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import torch
from ab_common import elements_apart, write_rows


def _load(folder: Path, pkg_name: str = "blockattn_kernels_a"):
    """The saved kernels folder as its own package (its imports of blockattn.kernels.X that it
    holds pointed at itself; Triton needs real source files, so they are written out)."""
    import re
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="ab_"))
    pkg = root / pkg_name
    pkg.mkdir()
    names = {p.stem for p in folder.glob("*.py")} - {"__init__", "tiles"}
    for src in folder.glob("*.py"):
        text = src.read_text()
        for name in names:
            text = re.sub(rf"from blockattn\.kernels\.{name} import",
                          f"from {pkg_name}.{name} import", text)
            text = re.sub(rf"from blockattn\.kernels import {name} as",
                          f"from {pkg_name} import {name} as", text)
        (pkg / src.name).write_text(text)
    (pkg / "__init__.py").touch()
    sys.path.insert(0, str(root))
    return importlib.import_module(f"{pkg_name}.dispatch")



def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", type=Path, required=True,
                    help="saved copy of blockattn/kernels (version A)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rep-ms", type=float, default=200.0)
    ap.add_argument("--rounds", type=int, default=1,
                    help="timings per kernel, A and B alternating; the median is reported")
    ap.add_argument("--dtypes", default="bf16", help="comma-separated among bf16, fp16")
    ap.add_argument("--dims", default="128,64")
    ap.add_argument("--b", type=Path, default=None,
                    help="saved copy of blockattn/kernels as version B (default: the working tree)")
    ap.add_argument("--rotary", choices=("both", "on", "off"), default="both")
    ap.add_argument("--rotate-v", choices=("on", "off", "both"), default="on",
                    help="fused rotary on V too (on), on q and k only (off), or both in turn")
    ap.add_argument("--precision", choices=("accurate", "fast"), default="accurate",
                    help="the precision mode both versions launch (dispatch's `precision`)")
    args = ap.parse_args()
    import blockattn.kernels.dispatch as kb_tree
    from blockattn.bench.case import make_bench_case
    from blockattn.bench.measure import copy_ceiling, time_ms
    from blockattn.kernels.tiles import build_tile_table

    ka = _load(args.a)
    kb = _load(args.b, "blockattn_kernels_b") if args.b else kb_tree
    dev = torch.device("cuda")
    ceiling = copy_ceiling(4 << 30, 25, args.rep_ms, False)
    rows = []
    for dname in args.dtypes.split(","):
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dname]
        for D in (int(x) for x in args.dims.split(",")):
            c = make_bench_case(f"P-D{D}", B=1152, max_len=4096, sparsity=0.7, H=4, D=D,
                                dtype=dtype, device=dev)
            table = build_tile_table(c.offsets, c.T, 64)
            nbytes = c.q.numel() * c.q.element_size()
            rotate_vs = {"on": (True,), "off": (False,), "both": (True, False)}[args.rotate_v]
            modes = (([(False, True)] if args.rotary != "on" else [])  # (rotary, rotate_v)
                     + ([(True, rv) for rv in rotate_vs] if args.rotary != "off" else []))
            for rotary, rotate_v in modes:
                sinu = c.sinu if rotary else None  # the production table is fp32
                for kind, passes in (("fwd", 4), ("bwd", 7)):
                    res = {"dtype": dname, "D": D, "rotary": rotary, "rotate_v": rotate_v,
                           "kernel": kind, "precision": args.precision,
                           "floor_ms": passes * nbytes / (ceiling["tbps"] * 1e12) * 1e3}
                    fns = {}
                    for tag, mod in (("A", ka), ("B", kb)):
                        if kind == "fwd":
                            fns[tag] = functools.partial(mod.attention_fwd, c.q, c.k, c.v, table,
                                                         sinu, c.scale, 64, rotate_v,
                                                         precision=args.precision)
                        else:
                            fns[tag] = functools.partial(mod.attention_bwd, c.q, c.k, c.v, c.do,
                                                         table, sinu, c.scale, 64, rotate_v,
                                                         precision=args.precision)
                    outs = {tag: fn() for tag, fn in fns.items()}
                    a_out, b_out = outs["A"], outs["B"]
                    if kind == "fwd":
                        a_out, b_out = (a_out,), (b_out,)
                    res["B_apart_from_A"] = sum(elements_apart(b, a) for a, b in
                                                zip(a_out, b_out, strict=True))
                    res["B_nonfinite"] = sum(int((~torch.isfinite(b)).sum()) for b in b_out)
                    del outs, a_out, b_out
                    times: dict[str, list[float]] = {"A": [], "B": []}
                    for _ in range(args.rounds):
                        for tag, fn in fns.items():
                            times[tag].append(time_ms(fn, 25, args.rep_ms))
                    for tag, ts in times.items():
                        res[f"{tag}_ms"] = statistics.median(ts)
                        res[f"{tag}_runs_ms"] = ts
                    res["B_over_A"] = res["B_ms"] / res["A_ms"]
                    res["B_pct_ceiling"] = 100 * res["floor_ms"] / res["B_ms"]
                    res["A_pct_ceiling"] = 100 * res["floor_ms"] / res["A_ms"]
                    rows.append(res)
                    print(json.dumps(res), flush=True)
            del c
            torch.cuda.empty_cache()
    write_rows(args.out, "ab_kernels", ceiling, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
