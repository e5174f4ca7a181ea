"""A/B of the portable rotary backward formed in column chunks of the head dim (LaunchConfig
.chunks, attention._bwd_chunks) against the whole-tile body, in one run (same GPU, inputs, copy
ceiling), with the shipped plain backward beside them for the rotary/plain ratio.

    python benchmarks/ab_chunks.py --out DIR [--chunks 1,2] [--dtypes bf16,fp16] [--rounds 3]

Shape P (B=1152, max_len=4096, sparsity 0.7, H=4), D = 128, rotary on q, k and v. Each timing
is a median of triton.testing.do_bench, taken `--rounds` times alternating the variants (the
median of those is reported); the floor is 7 passes over a (T, H, D) tensor at the copy ceiling
measured in this run (the bench's). Each variant's gradients are compared with the whole-tile
body's: elements beyond 1 ulp + 2^-16 of the tensor's largest magnitude apart, and non-finite.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

import torch
from ab_common import elements_apart, write_rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rep-ms", type=float, default=200.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunks", default="1,2")
    ap.add_argument("--dtypes", default="bf16,fp16")
    args = ap.parse_args()
    from blockattn.bench.case import make_bench_case
    from blockattn.bench.measure import copy_ceiling, time_ms
    from blockattn.kernels import attention as A
    from blockattn.kernels import dispatch
    from blockattn.kernels.tiles import build_tile_table

    chunks = [int(x) for x in args.chunks.split(",")]
    dev = torch.device("cuda")
    ceiling = copy_ceiling(4 << 30, 25, args.rep_ms, False)
    rows = []
    for name in args.dtypes.split(","):
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[name]
        c = make_bench_case("P-D128", B=1152, max_len=4096, sparsity=0.7, H=4, D=128,
                            dtype=dtype, device=dev)
        table = build_tile_table(c.offsets, c.T, 64)
        floor = 7 * c.q.numel() * c.q.element_size() / (ceiling["tbps"] * 1e12) * 1e3
        outs = {ch: tuple(torch.full_like(c.q, float("nan")) for _ in range(3)) for ch in chunks}
        kernels = {"plain": functools.partial(dispatch.attention_bwd, c.q, c.k, c.v, c.do, table,
                                              None, c.scale, 64, True)}
        for ch in chunks:
            kernels[f"rotary_chunks{ch}"] = functools.partial(
                A.launch_bwd, c.q, c.k, c.v, c.do, table, c.sinu, c.scale, 64, True, outs[ch],
                chunks=ch)
        for fn in kernels.values():
            fn()
        torch.cuda.synchronize()
        res: dict = {"D": 128, "dtype": name, "floor_ms": floor, "elements": c.q.numel(),
                     "apart_from_chunks1": {}, "nonfinite": {}}
        for ch in chunks:
            for g, a, b in zip(("dQ", "dK", "dV"), outs[ch], outs[chunks[0]], strict=True):
                res["apart_from_chunks1"][f"chunks{ch}_{g}"] = elements_apart(a, b)
                res["nonfinite"][f"chunks{ch}_{g}"] = int((~torch.isfinite(a)).sum())
        times: dict[str, list[float]] = {k: [] for k in kernels}
        for _ in range(args.rounds):
            for k, fn in kernels.items():
                times[k].append(time_ms(fn, 25, args.rep_ms))
        for k, ts in times.items():
            ms = statistics.median(ts)
            res[k] = {"ms": ms, "pct_ceiling": 100 * floor / ms, "runs_ms": ts,
                      "over_plain": ms / statistics.median(times["plain"])}
        rows.append(res)
        print(json.dumps(res), flush=True)
        del c, outs, kernels
        torch.cuda.empty_cache()
    write_rows(args.out, "ab_chunks", ceiling, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
