"""Issue 23 probe: do two chains per SM overlap? The Gluon backward with one chain per CTA
(_bwd_kernel: two input stages) against two (_bwd_kernel_chains: two warpgroups, one stage each),
each timed on shape P (full) and with every tile pointed at the first block (compute-only: the
same work, L2-resident loads; stage_profile.l2_resident), in one run.

    python benchmarks/probe_chains.py --out DIR

If compute-only per tile halves with two chains, they overlap and what remains is exposed
load latency; if it does not, they contend for the SM (issue, shared memory, tensor cores).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

import torch
from ab_common import write_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--head-dims", default="128,64")
    args = ap.parse_args()
    from stage_profile import l2_resident

    from blockattn.bench.case import make_bench_case
    from blockattn.bench.measure import copy_ceiling, time_ms
    from blockattn.kernels import attention_gluon as G
    from blockattn.kernels.tiles import build_tile_table

    dev = torch.device("cuda")
    ceiling = copy_ceiling(4 << 30, 25, 200.0, False)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    rows = []
    for D in [int(x) for x in args.head_dims.split(",")]:
        c = make_bench_case(f"P-D{D}", B=1152, max_len=4096, sparsity=0.7, H=4, D=D,
                            dtype=torch.bfloat16, device=dev)
        table = build_tile_table(c.offsets, c.T, 64)
        n_tiles = table.n_slots * c.q.shape[1]
        floor_ms = 7 * c.q.numel() * c.q.element_size() / (ceiling["tbps"] * 1e12) * 1e3
        grads = tuple(torch.empty_like(c.q) for _ in range(3))
        shipped = G.configs
        variants = {"1chain_1cta": (1, 1), "1chain_2cta": (1, 2), "2chains": (2, 1)}
        times: dict[str, list[float]] = {}
        try:
            for _ in range(args.rounds):
                for name, (chains, per_sm) in variants.items():
                    G.configs = lambda device, d=D, p=per_sm: {d: p}
                    for stage, tab in (("full", table), ("compute", l2_resident(table))):
                        fn = functools.partial(G.launch_bwd, c.q, c.k, c.v, c.do, grads, tab,
                                               c.scale, n_chains=chains)
                        fn()
                        times.setdefault(f"{name}_{stage}", []).append(time_ms(fn, 25, 200.0))
        finally:
            G.configs = shipped
        res = {"D": D, "floor_ms": floor_ms, "tiles_per_sm": n_tiles / sms}
        for name, ts in times.items():
            ms = statistics.median(ts)
            res[name] = {"ms": ms, "pct_ceiling": 100 * floor_ms / ms,
                         "us_per_tile_per_sm": 1e3 * ms / (n_tiles / sms), "runs_ms": ts}
        rows.append(res)
        print(json.dumps({k: (v["ms"] if isinstance(v, dict) else v) for k, v in res.items()}),
              flush=True)
        del c, grads
        torch.cuda.empty_cache()
    write_rows(args.out, "probe_chains", ceiling, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
