"""Launch-config sweep for the blockattn kernels at shape P (one GPU call).

    python benchmarks/tune.py --out DIR [--head-dims 128,64]

For each kernel (fwd/bwd x plain/rotary) times every (num_warps, num_stages, programs_per_sm,
maxnreg) in the grid given on the command line (defaults: the axes that mattered on an H200)
with `triton.testing.do_bench` medians, after checking the result is bitwise equal to the
current default config's (launch configs must not change numerics). Writes DIR/tune.json
incrementally and prints the best config per kernel and its % of the same-run copy ceiling.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import time
from pathlib import Path

import torch
from triton.testing import do_bench

from blockattn.cases.generate import make_case
from blockattn.kernels import attention as A
from blockattn.kernels import dispatch
from blockattn.kernels.tiles import build_tile_table


def _ints(text: str) -> tuple[int | None, ...]:
    """'0,168,none' -> (0, 168, None)."""
    return tuple(None if t.strip().lower() == "none" else int(t) for t in text.split(","))


def copy_ceiling_tbps(numel: int) -> float:
    """TB/s of a device-to-device bf16 copy (bytes read + written)."""
    src = torch.randn(numel, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    return 4 * numel / (ms * 1e-3) / 1e12


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--head-dims", default="128,64")
    ap.add_argument("--time-budget-s", type=float, default=400)
    # The first H200 sweep (results/h200_2026-11-21/tune_d128.json) found 8 warps 1.5-2x slower
    # everywhere, stages without effect and persistent grids slower than one program per tile,
    # so the defaults sweep the register cap: it sets how many CTAs (loads in flight) fit on an SM.
    ap.add_argument("--warps", type=_ints, default=(4,))
    ap.add_argument("--stages", type=_ints, default=(1,))
    ap.add_argument("--programs-per-sm", type=_ints, default=(0,))
    ap.add_argument("--maxnreg", type=_ints, default=(None, 128, 168, 200))
    ap.add_argument("--kernels", default="fwd,bwd")
    ap.add_argument("--rotary", default="off,on", help="which of off,on to sweep")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    doc: dict = {"gpu": torch.cuda.get_device_name(0), "runs": []}
    doc["copy_ceiling_TBps"] = ceiling = copy_ceiling_tbps(4 * 1432587 * 4 * 128)
    for D in (int(d) for d in args.head_dims.split(",")):
        case = make_case(B=1152, max_len=4096, sparsity=0.7, H=4, D=D, dtype=torch.bfloat16,
                         device="cuda", seed=1)
        q, k, v, do, off = case.q, case.k, case.v, case.grad_out, case.offsets
        table = build_tile_table(off, q.shape[0], 64)
        scale = 1 / math.sqrt(D)
        tb = q.numel() * q.element_size()
        for kernel, rotary in itertools.product(
            args.kernels.split(","), [r == "on" for r in args.rotary.split(",")]
        ):
            sinu = case.sinu_pos if rotary else None
            key = (kernel, rotary, D)
            default = A.launch_config(*key)
            if kernel == "fwd":
                outs = (torch.empty_like(q),)
                fn = functools.partial(dispatch.attention_fwd, q, k, v, table, sinu, scale, 64,
                                       True, out=outs[0])
                nbytes = 4 * tb
            else:
                outs = tuple(torch.empty_like(q) for _ in range(3))
                fn = functools.partial(dispatch.attention_bwd, q, k, v, do, table, sinu, scale, 64,
                                       True, grads=outs)
                nbytes = 7 * tb
            if rotary:
                nbytes += sinu.numel() * sinu.element_size()
            fn()
            ref = tuple(t.clone() for t in outs)
            grid = itertools.product(args.warps, args.stages, args.programs_per_sm, args.maxnreg)
            for w, st, pps, nreg in grid:
                if time.time() - t_start > args.time_budget_s:
                    doc["stopped"] = "time budget"
                    break
                A.CONFIGS[key] = A.LaunchConfig(w, st, pps, nreg)
                row = {"D": D, "kernel": kernel, "rotary": rotary, "num_warps": w,
                       "num_stages": st, "programs_per_sm": pps, "maxnreg": nreg}
                try:
                    for t in outs:
                        t.fill_(float("nan"))
                    fn()
                    row["bitwise_equal_default"] = all(
                        torch.equal(a, b) for a, b in zip(outs, ref, strict=True))
                    ms = do_bench(fn, warmup=25, rep=150, return_mode="median")
                    row.update(ms=ms, pct_ceiling=100 * nbytes / (ms * 1e-3) / 1e12 / ceiling)
                except Exception as exc:
                    row["error"] = repr(exc)[:500]
                doc["runs"].append(row)
                (out / "tune.json").write_text(json.dumps(doc, indent=1))
            A.CONFIGS[key] = default
        del case, q, k, v, do
        torch.cuda.empty_cache()
    print(f"GPU {doc['gpu']}, copy ceiling {ceiling:.2f} TB/s")
    for key, group in itertools.groupby(
        sorted((r for r in doc["runs"] if "ms" in r),
               key=lambda r: (r["D"], r["kernel"], r["rotary"], r["ms"])),
        key=lambda r: (r["D"], r["kernel"], r["rotary"]),
    ):
        rows = list(group)
        best = rows[0]
        print(f"D={key[0]} {key[1]} rotary={key[2]}: best {best['ms']:.3f} ms "
              f"({best['pct_ceiling']:.1f}% of ceiling) warps={best['num_warps']} "
              f"stages={best['num_stages']} pps={best['programs_per_sm']} "
              f"maxnreg={best['maxnreg']}; "
              f"worst {rows[-1]['ms']:.3f} ms; bitwise-equal all: "
              f"{all(r['bitwise_equal_default'] for r in rows)}")


if __name__ == "__main__":
    main()
