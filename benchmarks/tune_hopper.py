"""Hopper (TMA, software-pipelined persistent) path against the portable kernels, at shape P.

    python benchmarks/tune_hopper.py --out DIR [--head-dims 128,64] [--time-budget-s 420]

One GPU call. For every kernel (fwd/bwd x plain/rotary x head dim) it times the portable launch
and each Hopper config of the grid (num_warps, num_stages, programs_per_sm, warp_specialize)
with `triton.testing.do_bench` medians, against the device copy ceiling measured in the same run.
Before timing a config it checks its outputs against the portable kernel's (NaN-poisoned outputs:
an unwritten element shows) and, on a small case, that non-finite values in the rows a TMA box
reads past a partial block never reach the block's outputs. Writes DIR/tune_hopper.json after
every row, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import torch
from triton.testing import do_bench

from blockattn.bench.case import make_bench_case
from blockattn.bench.measure import copy_ceiling
from blockattn.kernels import attention as A
from blockattn.kernels import attention_hopper as AH
from blockattn.kernels.tiles import build_tile_table

# (num_warps, num_stages, programs_per_sm, warp_specialize); configs that do not compile or do
# not fit are recorded as errors, not skipped silently.
GRID = {
    "fwd": [(4, 2, 1, 0), (4, 2, 2, 0), (4, 3, 1, 0), (4, 2, 1, 1), (4, 2, 2, 1)],
    "bwd": [(4, 2, 1, 0), (4, 2, 2, 0), (4, 1, 2, 0), (4, 2, 1, 1)],
}


def _launch(path: str, kernel: str, q, k, v, do, table, sinu, scale, outs):
    if kernel == "fwd":
        if path == "portable":
            return functools.partial(A.launch_fwd, q, k, v, table, sinu, scale, 64, True,
                                     outs[0])
        return functools.partial(AH.launch_fwd, q, k, v, outs[0], table, sinu, scale, 64, True)
    if path == "portable":
        return functools.partial(A.launch_bwd, q, k, v, do, table, sinu, scale, 64, True, outs)
    return functools.partial(AH.launch_bwd, q, k, v, do, outs, table, sinu, scale, 64, True)


def containment(kernel: str, rotary: bool, D: int) -> dict:
    """Inf/NaN in the next sequence's rows (read by the partial block's TMA box) stay there."""
    dev = "cuda"
    lens = [100, 37, 64]  # blocks of 64+36, 37, 64 valid tokens: two partial blocks
    off = torch.tensor([0, 100, 137, 201], dtype=torch.int32, device=dev)
    T, H = sum(lens), 4
    g = torch.Generator(device=dev).manual_seed(7)
    q, k, v, do = (torch.randn(T, H, D, device=dev, generator=g).bfloat16() for _ in range(4))
    sinu = torch.rand(T, D, device=dev, generator=g) if rotary else None
    table = build_tile_table(off, T, 64)
    outs_clean = tuple(torch.full_like(q, float("nan")) for _ in range(3 if kernel == "bwd" else 1))
    _launch("hopper", kernel, q, k, v, do, table, sinu, 0.125, outs_clean)()
    for t in (q, k, v, do):  # poison sequence 2 (tokens 137..200) and the tail of sequence 1
        t[137:, :, : D // 2] = float("inf")
        t[137:, :, D // 2:] = float("nan")
    outs = tuple(torch.full_like(q, float("nan")) for _ in outs_clean)
    _launch("hopper", kernel, q, k, v, do, table, sinu, 0.125, outs)()
    torch.cuda.synchronize()
    ok = all(torch.equal(a[:137], b[:137]) and bool(torch.isfinite(a[:137]).all())
             for a, b in zip(outs, outs_clean, strict=True))
    return {"containment_ok": ok}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--head-dims", default="128,64")
    ap.add_argument("--kernels", default="fwd,bwd")
    ap.add_argument("--rotary", default="off,on")
    ap.add_argument("--time-budget-s", type=float, default=420)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    doc: dict = {"gpu": torch.cuda.get_device_name(0), "rows": []}
    doc["copy_ceiling"] = ceil = copy_ceiling(2 * 2**30, 50, 300, False)
    tbps = ceil["tbps"]

    def save() -> None:
        (out / "tune_hopper.json").write_text(json.dumps(doc, indent=1))

    for D in (int(d) for d in args.head_dims.split(",")):
        case = make_bench_case("P", B=1152, max_len=4096, sparsity=0.7, H=4, D=D,
                               dtype=torch.bfloat16, device=torch.device("cuda"), seed=1)
        q, k, v, do = case.q, case.k, case.v, case.do
        table = build_tile_table(case.offsets, case.T, 64)
        tb = case.tensor_bytes()
        for kernel in args.kernels.split(","):
            for rotary in (r == "on" for r in args.rotary.split(",")):
                sinu = case.sinu if rotary else None
                nbytes = (4 if kernel == "fwd" else 7) * tb + (case.sinu_bytes() if rotary else 0)
                n_out = 1 if kernel == "fwd" else 3
                ref = tuple(torch.full_like(q, float("nan")) for _ in range(n_out))
                fn = _launch("portable", kernel, q, k, v, do, table, sinu, case.scale, ref)
                fn()
                ms = do_bench(fn, warmup=25, rep=150, return_mode="median")
                base = {"D": D, "kernel": kernel, "rotary": rotary}
                doc["rows"].append({**base, "path": "portable", "ms": ms,
                                    "pct_ceiling": 100 * nbytes / (ms * 1e-3) / 1e12 / tbps})
                save()
                outs = tuple(torch.empty_like(q) for _ in range(n_out))
                for w, st, pps, ws in GRID[kernel]:
                    if time.time() - t0 > args.time_budget_s:
                        doc["stopped"] = "time budget"
                        save()
                        break
                    row = {**base, "path": "hopper", "num_warps": w, "num_stages": st,
                           "programs_per_sm": pps, "warp_specialize": bool(ws)}
                    AH.CONFIGS[(kernel, rotary, D)] = AH.HopperConfig(w, st, pps, bool(ws))
                    try:
                        for t in outs:
                            t.fill_(float("nan"))
                        fn = _launch("hopper", kernel, q, k, v, do, table, sinu, case.scale, outs)
                        fn()
                        torch.cuda.synchronize()
                        row["bitwise_equal_portable"] = all(
                            torch.equal(a, b) for a, b in zip(outs, ref, strict=True))
                        row["max_abs_diff"] = max(
                            float((a.float() - b.float()).abs().nan_to_num(float("inf")).max())
                            for a, b in zip(outs, ref, strict=True))
                        row.update(containment(kernel, rotary, D))
                        ms = do_bench(fn, warmup=25, rep=150, return_mode="median")
                        row.update(ms=ms, pct_ceiling=100 * nbytes / (ms * 1e-3) / 1e12 / tbps)
                    except Exception as exc:  # record and go on: one config must not hide others
                        row["error"] = repr(exc)[:400]
                    doc["rows"].append(row)
                    save()
                AH.CONFIGS.pop((kernel, rotary, D), None)
        del case, q, k, v, do
        torch.cuda.empty_cache()
    print(f"GPU {doc['gpu']}, copy ceiling {tbps:.2f} TB/s")
    for r in doc["rows"]:
        cfg = ("portable" if r["path"] == "portable" else
               f"hopper w{r['num_warps']} s{r['num_stages']} p{r['programs_per_sm']} "
               f"ws{int(r['warp_specialize'])}")
        res = (f"{r['ms']:.3f} ms {r['pct_ceiling']:.1f}%" if "ms" in r else
               f"ERROR {r.get('error', '')[:120]}")
        extra = "" if r["path"] == "portable" else (
            f" bitwise={r.get('bitwise_equal_portable')} diff={r.get('max_abs_diff')}"
            f" contained={r.get('containment_ok')}")
        print(f"D{r['D']} {r['kernel']} rot={int(r['rotary'])} {cfg}: {res}{extra}")


if __name__ == "__main__":
    main()
