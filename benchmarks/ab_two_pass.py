"""A/B of the portable backward in one launch against two (dV, dK and dS first; dQ = dS K from
the stored dS second; attention.launch_bwd's two_pass), in one run (same GPU, inputs, copy
ceiling), with the shipped plain backward beside them for the rotary/plain ratio.

    python benchmarks/ab_two_pass.py --out DIR [--head-dims 128,64] [--rounds 3]

Shape P (B=1152, max_len=4096, sparsity 0.7, H=4, bf16), rotary on q, k and v. Each timing is
a median of triton.testing.do_bench, taken `--rounds` times alternating the kernels (the median
of those is reported); the bwd floor is 7 passes over a (T, H, D) tensor at the copy ceiling
measured in this run (the bench's). The two launches' gradients must be bitwise the one
launch's (same operands, same MMAs in the same order): the count of differing bits is recorded.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

import torch


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
        outs = {name: tuple(torch.full_like(c.q, float("nan")) for _ in range(3))
                for name in ("one", "two", "two_qk", "one_qk")}
        kernels = {
            "plain": functools.partial(dispatch.attention_bwd, c.q, c.k, c.v, c.do, table, None,
                                       c.scale, 64, True),
            "rotary_one_launch": functools.partial(A.launch_bwd, c.q, c.k, c.v, c.do, table,
                                                   c.sinu, c.scale, 64, True, outs["one"],
                                                   two_pass=False),
            "rotary_two_launches": functools.partial(A.launch_bwd, c.q, c.k, c.v, c.do, table,
                                                     c.sinu, c.scale, 64, True, outs["two"],
                                                     two_pass=True),
            "rotary_qk_one_launch": functools.partial(A.launch_bwd, c.q, c.k, c.v, c.do, table,
                                                      c.sinu, c.scale, 64, False,
                                                      outs["one_qk"], two_pass=False),
            "rotary_qk_two_launches": functools.partial(A.launch_bwd, c.q, c.k, c.v, c.do,
                                                        table, c.sinu, c.scale, 64, False,
                                                        outs["two_qk"], two_pass=True),
        }
        for fn in kernels.values():
            fn()
        torch.cuda.synchronize()
        differ = {}
        for a, b in (("one", "two"), ("one_qk", "two_qk")):
            for nm, x, y in zip(("dQ", "dK", "dV"), outs[a], outs[b], strict=True):
                differ[f"{b}_{nm}"] = int((x.view(torch.int16) != y.view(torch.int16)).sum())
        times: dict[str, list[float]] = {name: [] for name in kernels}
        for _ in range(args.rounds):
            for name, fn in kernels.items():
                times[name].append(time_ms(fn, 25, args.rep_ms))
        res: dict = {"D": D, "dtype": "bf16", "floor_ms": floor_ms, "elements_differing": differ,
                     "elements": c.q.numel()}
        for name, ts in times.items():
            ms = statistics.median(ts)
            res[name] = {"ms": ms, "pct_ceiling": 100 * floor_ms / ms, "runs_ms": ts}
        plain = res["plain"]["ms"]
        res["one_over_plain"] = res["rotary_one_launch"]["ms"] / plain
        res["two_over_plain"] = res["rotary_two_launches"]["ms"] / plain
        res["two_over_one"] = res["rotary_two_launches"]["ms"] / res["rotary_one_launch"]["ms"]
        rows.append(res)
        print(json.dumps(res), flush=True)
        del c, outs, kernels
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {**device_info(), "commit": git_commit(), "ceiling": ceiling,
            "command": "python benchmarks/ab_two_pass.py " + " ".join(sys.argv[1:])}
    (args.out / "ab_two_pass.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                          indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
