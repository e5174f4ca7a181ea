"""A/B timing of the fused-rotary backward's paths in one run (same GPU, inputs and copy
ceiling): the default rotary backward (dispatch.attention_bwd with BLOCKATTN_KERNEL_PATH
unset) against the Gluon rotary backward (attention_gluon_rotary), with the plain default
backward of the same inputs as the ratio's denominator.

    python benchmarks/ab_gluon_rotary.py --out DIR [--rounds 3] [--head-dims 128,64] [--a DIR]...

Shape P (B=1152, max_len=4096, sparsity 0.7, H=4), rotate_v on and off; each timing is a median
of triton.testing.do_bench, taken `--rounds` times alternating the paths (the median of those
is reported); the bwd floor is 7 passes over a (T, H, D) tensor at the copy ceiling measured in
this run. Each Gluon output is compared with the default path's (elements_apart: beyond 1 ulp
+ 2^-16 of the largest magnitude). `--a DIR` also times DIR/attention_gluon_rotary.py (another
commit's module, e.g. `git archive BASE blockattn/kernels | tar -x -C DIR --strip-components 2`)
as "a_rot" (repeated: "a_rot:<DIR's name>" each), the rest of the package this one's.
`--portable` also times the default dispatch under BLOCKATTN_KERNEL_PATH=portable
("rotary_portable"): the comparison for a dtype whose default is already Gluon.
(Before 2026-11-26's removal of the one-chain kernel this script also timed it:
results/h200_2026-11-26e/ab_f6db98d.)
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
from pathlib import Path

import torch
from ab_common import elements_apart, load_module, write_rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rep-ms", type=float, default=200.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--head-dims", default="128,64")
    ap.add_argument("--rotate-v", default="on,off")
    ap.add_argument("--a", type=Path, action="append", default=[],
                    help="a directory holding another attention_gluon_rotary.py (repeatable)")
    ap.add_argument("--portable", action="store_true",
                    help="also time the rotary backward under BLOCKATTN_KERNEL_PATH=portable")
    args = ap.parse_args()
    from blockattn.bench.case import make_bench_case
    from blockattn.bench.measure import copy_ceiling, time_ms
    from blockattn.kernels import attention_gluon_rotary as GR
    from blockattn.kernels import dispatch
    from blockattn.kernels.tiles import build_tile_table

    os.environ.pop("BLOCKATTN_KERNEL_PATH", None)
    others = {}
    for d in args.a:
        name = "a_rot" if len(args.a) == 1 else f"a_rot:{d.name}"
        others[name] = load_module(d, "attention_gluon_rotary.py", f"gluon_rotary_{len(others)}")
    dev = torch.device("cuda")
    ceiling = copy_ceiling(4 << 30, 25, args.rep_ms, False)
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    rows = []
    for D in [int(x) for x in args.head_dims.split(",")]:
        for dt in args.dtypes.split(","):
            c = make_bench_case(f"P-D{D}", B=1152, max_len=4096, sparsity=0.7, H=4, D=D,
                                dtype=dtypes[dt], device=dev)
            table = build_tile_table(c.offsets, c.T, 64)
            nbytes = c.q.numel() * c.q.element_size()
            floor_ms = 7 * nbytes / (ceiling["tbps"] * 1e12) * 1e3
            sinu = c.sinu.to(dev)
            for rv in args.rotate_v.split(","):
                rotate_v = rv == "on"
                grads = tuple(torch.empty_like(c.q) for _ in range(3))
                paths = {
                    "plain": functools.partial(dispatch.attention_bwd, c.q, c.k, c.v, c.do,
                                               table, None, c.scale, 64, True),
                    "rotary_default": functools.partial(dispatch.attention_bwd, c.q, c.k, c.v,
                                                        c.do, table, sinu, c.scale, 64,
                                                        rotate_v),
                }
                if args.portable:
                    paths["rotary_portable"] = functools.partial(
                        _portable, dispatch.attention_bwd, c.q, c.k, c.v, c.do, table, sinu,
                        c.scale, 64, rotate_v)
                gluon = {"gluon_rot": GR, **others}
                for name, mod in gluon.items():
                    paths[name] = functools.partial(mod.launch_bwd, c.q, c.k, c.v, c.do, grads,
                                                    table, sinu, c.scale, rotate_v)
                ref = [t.clone() for t in paths["rotary_default"]()]
                apart = {}
                for name in [*gluon, *(["rotary_portable"] if args.portable else [])]:
                    got = paths[name]()
                    apart[name] = {nm: elements_apart(a, b) for nm, a, b in
                                   zip(("dQ", "dK", "dV"), got, ref, strict=True)}
                    print(f"D={D} {dt} rotate_v={rv} {name} vs default: {apart[name]}",
                          flush=True)
                times: dict[str, list[float]] = {name: [] for name in paths}
                for _ in range(args.rounds):
                    for name, fn in paths.items():
                        times[name].append(time_ms(fn, 25, args.rep_ms))
                med = {name: statistics.median(ts) for name, ts in times.items()}
                for name, ms in med.items():
                    row = dict(D=D, dtype=dt, rotate_v=rotate_v, path=name, ms=round(ms, 4),
                               rounds=[round(x, 4) for x in times[name]],
                               pct_of_ceiling=round(100 * floor_ms / ms, 1),
                               vs_plain=round(ms / med["plain"], 3),
                               elements_apart=apart.get(name))
                    rows.append(row)
                    print(f"D={D} {dt} rotate_v={rv} {name:15s} {ms:7.3f} ms  "
                          f"{row['pct_of_ceiling']:5.1f} %  {row['vs_plain']:.3f}x plain",
                          flush=True)
    path = write_rows(args.out, "ab_gluon_rotary", ceiling, rows)
    print(path)
    return 0


def _portable(fn, *args):
    """fn(*args) with BLOCKATTN_KERNEL_PATH=portable (dispatch reads it per call)."""
    os.environ["BLOCKATTN_KERNEL_PATH"] = "portable"
    try:
        return fn(*args)
    finally:
        os.environ.pop("BLOCKATTN_KERNEL_PATH", None)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
