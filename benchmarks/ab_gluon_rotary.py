"""A/B of the fused-rotary backward's two paths in one run (same GPU, inputs, copy ceiling):
the portable Triton kernel against the Gluon rotary kernel (attention_gluon_rotary; its two
ways of loading and rotating the operands, gather=False/True, see _rotated), with the
plain backward (the shipped default path) timed beside them for the rotary/plain ratio.

    python benchmarks/ab_gluon_rotary.py --out DIR [--head-dims 128,64] [--rounds 3]

Shape P (B=1152, max_len=4096, sparsity 0.7, H=4, bf16), rotary on q, k and v. Each timing is
a median of triton.testing.do_bench, taken `--rounds` times alternating the kernels (the median
of those is reported); the bwd floor is 7 passes over a (T, H, D) tensor at the copy ceiling
measured in this run (the bench's). It also compares the two rotary paths' gradients at shape
P: the count of elements beyond 1 ulp + 2^-16 of the tensor's scale apart (the test's rule).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

import torch


def _apart(a: torch.Tensor, b: torch.Tensor) -> int:
    fa, fb = a.double(), b.double()
    ulp = torch.finfo(a.dtype).eps * torch.maximum(fa.abs(), fb.abs())
    tol = ulp + 2.0**-16 * float(fb.abs().max())
    return int((~((fa - fb).abs() <= tol)).sum())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rep-ms", type=float, default=200.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--head-dims", default="128,64")
    args = ap.parse_args()
    from blockattn.bench.case import make_bench_case
    from blockattn.bench.measure import copy_ceiling, time_ms
    from blockattn.kernels import attention as A
    from blockattn.kernels import attention_gluon_rotary as GR
    from blockattn.kernels import dispatch
    from blockattn.kernels.tiles import build_tile_table
    from blockattn.run.execute import device_info, git_commit

    dev = torch.device("cuda")
    ceiling = copy_ceiling(4 << 30, 25, args.rep_ms, False)
    rows = []
    for D in [int(x) for x in args.head_dims.split(",")]:
        c = make_bench_case(f"P-D{D}", B=1152, max_len=4096, sparsity=0.7, H=4, D=D,
                            dtype=torch.bfloat16, device=dev)
        table = build_tile_table(c.offsets, c.T, 64)
        nbytes = c.q.numel() * c.q.element_size()
        floor_ms = 7 * nbytes / (ceiling["tbps"] * 1e12) * 1e3
        outs = {name: tuple(torch.empty_like(c.q) for _ in range(3))
                for name in ("portable", "gluon", "gluon_gather")}
        kernels = {
            "plain": functools.partial(dispatch.attention_bwd, c.q, c.k, c.v, c.do, table, None,
                                       c.scale, 64, True),
            "rotary_portable": functools.partial(A.launch_bwd, c.q, c.k, c.v, c.do, table,
                                                 c.sinu, c.scale, 64, True, outs["portable"]),
            "rotary_gluon": functools.partial(GR.launch_bwd, c.q, c.k, c.v, c.do, table, c.sinu,
                                              c.scale, True, outs["gluon"], gather=False),
            "rotary_gluon_gather": functools.partial(GR.launch_bwd, c.q, c.k, c.v, c.do, table,
                                                     c.sinu, c.scale, True,
                                                     outs["gluon_gather"], gather=True),
        }
        for fn in kernels.values():
            fn()
        torch.cuda.synchronize()
        apart = {f"{g}_{nm}": _apart(a, b) for g in ("gluon", "gluon_gather")
                 for nm, a, b in zip(("dQ", "dK", "dV"), outs[g], outs["portable"], strict=True)}
        times: dict[str, list[float]] = {name: [] for name in kernels}
        for _ in range(args.rounds):
            for name, fn in kernels.items():
                times[name].append(time_ms(fn, 25, args.rep_ms))
        res: dict = {"D": D, "dtype": "bf16", "floor_ms": floor_ms, "elements_apart": apart,
                     "elements": c.q.numel()}
        for name, ts in times.items():
            ms = statistics.median(ts)
            res[name] = {"ms": ms, "pct_ceiling": 100 * floor_ms / ms, "runs_ms": ts}
        res["gluon_over_portable"] = res["rotary_gluon"]["ms"] / res["rotary_portable"]["ms"]
        res["gluon_rotary_over_plain"] = res["rotary_gluon"]["ms"] / res["plain"]["ms"]
        res["portable_rotary_over_plain"] = res["rotary_portable"]["ms"] / res["plain"]["ms"]
        rows.append(res)
        print(json.dumps(res), flush=True)
        del c, outs, kernels
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {**device_info(), "commit": git_commit(), "ceiling": ceiling,
            "command": "python benchmarks/ab_gluon_rotary.py " + " ".join(sys.argv[1:])}
    (args.out / "ab_gluon_rotary.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
