"""A/B timing of the backward's two paths in one run (same GPU, inputs and copy ceiling): the
portable Triton kernel (BLOCKATTN_KERNEL_PATH=portable) against the Gluon backward
(BLOCKATTN_KERNEL_PATH=gluon), both launched through dispatch.attention_bwd as ops does.

    python benchmarks/ab_gluon.py --out DIR [--programs-per-sm 1,2] [--chains 1,2]

Shape P (B=1152, max_len=4096, sparsity 0.7, H=4) at D=128 and D=64, bf16 and fp16; each
timing is a median of triton.testing.do_bench, taken `--rounds` times alternating the paths
(the median of those is reported); the bwd floor is 7 passes over a (T, H, D) tensor at the
copy ceiling measured in this run. `--programs-per-sm` also times the Gluon path at each
given CTAs per SM (in place of attention_gluon.configs()), to choose its CONFIGS; `--chains`
at each given number of chains per CTA (in place of attention_gluon.chains()), to choose its
GPU_CHAINS. "gluon" is the shipped default on the GPU the run is on.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
from pathlib import Path

import torch
from ab_common import write_rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rep-ms", type=float, default=200.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--programs-per-sm", default="")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--chains", default="", help="also time these chains per CTA (e.g. 2)")
    ap.add_argument("--head-dims", default="128,64")
    args = ap.parse_args()
    from blockattn.bench.case import make_bench_case
    from blockattn.bench.measure import copy_ceiling, time_ms
    from blockattn.kernels import attention_gluon as G
    from blockattn.kernels import dispatch
    from blockattn.kernels.tiles import build_tile_table

    dev = torch.device("cuda")
    ceiling = copy_ceiling(4 << 30, 25, args.rep_ms, False)
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    ppsm = [int(x) for x in args.programs_per_sm.split(",") if x]
    rows = []
    chains = [int(x) for x in args.chains.split(",") if x]
    for D in [int(x) for x in args.head_dims.split(",")]:
        for dt in args.dtypes.split(","):
            c = make_bench_case(f"P-D{D}", B=1152, max_len=4096, sparsity=0.7, H=4, D=D,
                                dtype=dtypes[dt], device=dev)
            table = build_tile_table(c.offsets, c.T, 64)
            nbytes = c.q.numel() * c.q.element_size()
            floor_ms = 7 * nbytes / (ceiling["tbps"] * 1e12) * 1e3
            fn = functools.partial(dispatch.attention_bwd, c.q, c.k, c.v, c.do, table, None,
                                   c.scale, 64, True)
            # "gluon" is the shipped default (its configs() and chains()); the axes replace them
            paths = {"portable": ("portable", None, None), "gluon": ("gluon", None, None)}
            for p in ppsm:
                paths[f"gluon_{p}_per_sm"] = ("gluon", p, None)
            for n in chains:
                paths[f"gluon_{n}_chains"] = ("gluon", None, n)
            times: dict[str, list[float]] = {name: [] for name in paths}
            # The launcher takes its CTAs per SM from configs(device) (the measured defaults,
            # which name D = 128): the axis replaces that lookup, not PROGRAMS_PER_SM.
            shipped, shipped_chains = G.configs, G.chains
            try:
                for _ in range(args.rounds):
                    for name, (env, p, n) in paths.items():
                        os.environ["BLOCKATTN_KERNEL_PATH"] = env
                        G.configs = (lambda device, d=D, p=p: {d: p}) if p else shipped
                        G.chains = (lambda device, d=D, n=n: {d: n}) if n else shipped_chains
                        fn()
                        times[name].append(time_ms(fn, 25, args.rep_ms))
            finally:
                G.configs, G.chains = shipped, shipped_chains
            res = {"D": D, "dtype": dt, "floor_ms": floor_ms}
            for name, ts in times.items():
                ms = statistics.median(ts)
                res[name] = {"ms": ms, "pct_ceiling": 100 * floor_ms / ms, "runs_ms": ts}
            res["gluon_over_portable"] = res["gluon"]["ms"] / res["portable"]["ms"]
            rows.append(res)
            print(json.dumps(res), flush=True)
            del c
            torch.cuda.empty_cache()
    os.environ.pop("BLOCKATTN_KERNEL_PATH", None)
    write_rows(args.out, "ab_gluon", ceiling, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
