"""Which stage limits the kernels at shape P: memory alone, compute alone, or their overlap.

    python benchmarks/stage_profile.py --out DIR [--head-dims 128,64]

For each kernel (fwd/bwd x plain/rotary) and head dim this times, with `do_bench` medians in one
run next to the device copy ceiling:
- full: the shipped kernel and launch config on the shape-P case;
- compute-only: the same kernel and grid, but every tile table row points at the sequence's
  first 64-token block (start 0, length 64): every program does the full tile work, while its
  loads and stores hit the same few L2-resident lines instead of HBM (identical values are
  written, so the write races are benign). This is the time of the compute and on-chip traffic;
- memory-only: a Triton tile-copy kernel with the same grid, tile table, masks and tile shapes
  that reads the same tiles (plus sin/cos with rotary) and writes the same outputs with no math:
  the time of the access pattern alone;
- no-split: full and compute-only with the hi/lo operand splits switched off (one bf16 MMA per
  product), to price the accuracy feature.
If full ~= compute-only >> memory-only, the kernel is limited by its in-CTA compute chain, not
by HBM. Writes DIR/stages.json (incrementally) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import time
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from blockattn.bench.measure import copy_ceiling
from blockattn.cases.generate import make_case
from blockattn.kernels import attention as A
from blockattn.kernels import dispatch
from blockattn.kernels.tiles import TileTable, build_tile_table


@triton.jit
def _copy_tiles(X0, X1, X2, X3, Y0, Y1, Y2, SIN, tile_start, tile_len, n_tiles,
                stride_t, stride_h, stride_st, N_IN: tl.constexpr, N_OUT: tl.constexpr,
                ROTARY: tl.constexpr, H: tl.constexpr, HEAD_DIM: tl.constexpr,
                BLOCK: tl.constexpr):
    """Read N_IN (BLOCK, D) tiles (+ the sin/cos rows), write N_OUT tiles: no attention math."""
    tile = tl.program_id(0)
    blk = tile // H
    h = tile % H
    n = tl.load(tile_len + blk, mask=tile < n_tiles, other=0)
    if n > 0:
        start = tl.load(tile_start + blk)
        rows = tl.arange(0, BLOCK)
        tok = (start + rows).to(tl.int64)
        off = tok[:, None] * stride_t + h * stride_h + tl.arange(0, HEAD_DIM)[None, :]
        mask = (rows < n)[:, None]
        acc = tl.load(X0 + off, mask=mask, other=0.0).to(tl.float32)
        acc += tl.load(X1 + off, mask=mask, other=0.0).to(tl.float32)
        acc += tl.load(X2 + off, mask=mask, other=0.0).to(tl.float32)
        if N_IN == 4:
            acc += tl.load(X3 + off, mask=mask, other=0.0).to(tl.float32)
        if ROTARY:
            s_off = tok[:, None] * stride_st + tl.arange(0, HEAD_DIM)[None, :]
            acc += tl.load(SIN + s_off, mask=mask, other=0.0)
        y = acc.to(Y0.dtype.element_ty)
        tl.store(Y0 + off, y, mask=mask)
        if N_OUT == 3:
            tl.store(Y1 + off, y, mask=mask)
            tl.store(Y2 + off, y, mask=mask)


def memory_only(kernel: str, q, k, v, do, sinu, table: TileTable, outs) -> None:
    _, H, D = q.shape
    n_tiles = table.n_slots * H
    ins = (q, k, v, do) if kernel == "bwd" else (q, k, v, q)
    ys = tuple(outs) + (outs[0],) * (3 - len(outs))
    _copy_tiles[(n_tiles,)](
        *ins, *ys, sinu if sinu is not None else q, table.start, table.length, n_tiles,
        q.stride(0), q.stride(1), sinu.stride(0) if sinu is not None else 0,
        N_IN=4 if kernel == "bwd" else 3, N_OUT=len(outs), ROTARY=sinu is not None,
        H=H, HEAD_DIM=D, BLOCK=64, num_warps=4,
    )  # fmt: skip


def l2_resident(table: TileTable) -> TileTable:
    """Every row -> the first block (tokens 0..63): same grid and work, no HBM traffic."""
    return TileTable(torch.zeros_like(table.start), torch.full_like(table.length, 64),
                     table.n_slots)


def time_stage(fn, split: bool) -> float:
    """do_bench median of fn with the hi/lo splits on (shipped) or off."""
    real = A._flags
    if not split:
        A._flags = lambda *a: real(*a) | {"SPLIT": False, "CENTRED": False}
    try:
        fn()
        return do_bench(fn, warmup=25, rep=200, return_mode="median")
    finally:
        A._flags = real


def profile_head_dim(D: int, ceiling: float, doc: dict, out: Path) -> None:
    case = make_case(B=1152, max_len=4096, sparsity=0.7, H=4, D=D, dtype=torch.bfloat16,
                     device="cuda", seed=1)
    q, k, v, do = case.q, case.k, case.v, case.grad_out
    table = build_tile_table(case.offsets, q.shape[0], 64)
    hot = l2_resident(table)
    scale = 1 / math.sqrt(D)
    tb = q.numel() * q.element_size()
    for kernel in ("fwd", "bwd"):
        for rotary in (False, True):
            sinu = case.sinu_pos if rotary else None
            outs = tuple(torch.empty_like(q) for _ in range(1 if kernel == "fwd" else 3))
            nbytes = (4 if kernel == "fwd" else 7) * tb
            nbytes += sinu.numel() * sinu.element_size() if rotary else 0

            def run(tab: TileTable, kernel=kernel, sinu=sinu, outs=outs) -> None:
                if kernel == "fwd":
                    dispatch.attention_fwd(q, k, v, tab, sinu, scale, 64, True, out=outs[0])
                else:
                    dispatch.attention_bwd(q, k, v, do, tab, sinu, scale, 64, True, grads=outs)

            variants = {
                "full": functools.partial(run, table),
                "compute_only": functools.partial(run, hot),
                "memory_only": functools.partial(memory_only, kernel, q, k, v, do, sinu, table,
                                                 outs),
            }
            # The no-split switch patches the portable kernels' flags: the Gluon kernels have no
            # such switch, so their rows are split only (and say which path ran).
            gluon = (dispatch.gluon_bwd(q, sinu, 64, True, (q, k, v, do, *outs)) if kernel == "bwd"
                     else dispatch.gluon_fwd(q, sinu, 64, (q, k, v, outs[0])))
            for name, fn in variants.items():
                splits = (True,) if name == "memory_only" or gluon else (True, False)
                for split in splits:
                    row = {"D": D, "kernel": kernel, "rotary": rotary, "stage": name,
                           "split": split, "path": "gluon" if gluon else "triton"}
                    try:
                        t = time_stage(fn, split)
                        row.update(ms=t, pct_ceiling_of_full_bytes=100 * nbytes / (t * 1e-3)
                                   / 1e12 / ceiling)
                    except Exception as exc:
                        row["error"] = repr(exc)[:300]
                    doc["rows"].append(row)
                    (out / "stages.json").write_text(json.dumps(doc, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--head-dims", default="128,64")
    ap.add_argument("--path", choices=dispatch.PATHS, default="auto",
                    help="kernel path to profile (BLOCKATTN_KERNEL_PATH; hopper: the Triton TMA "
                         "path; gluon: the Gluon backward)")
    args = ap.parse_args()
    os.environ["BLOCKATTN_KERNEL_PATH"] = args.path
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # The bench's own ceiling: a 2 GiB-each-way device copy, do_bench median.
    ceiling = copy_ceiling(2**31, warmup_ms=50, rep_ms=300, smoke=False)["tbps"]
    doc = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "triton": triton.__version__, "date": time.strftime("%Y-%m-%d"),
           "copy_ceiling_TBps": ceiling, "kernel_path": args.path, "rows": []}
    for D in (int(d) for d in args.head_dims.split(",")):
        profile_head_dim(D, ceiling, doc, out)
        torch.cuda.empty_cache()
    print(f"GPU {doc['gpu']}, copy ceiling {ceiling:.2f} TB/s, {doc['date']}")
    print("| D | kernel | rotary | path | stage | split | ms | % of ceiling (full bytes) |")
    print("|---|---|---|---|---|---|---:|---:|")
    for r in doc["rows"]:
        val = (f"{r['ms']:.3f} | {r['pct_ceiling_of_full_bytes']:.1f}" if "ms" in r
               else f"error | {r['error'][:60]}")
        print(f"| {r['D']} | {r['kernel']} | {r['rotary']} | {r['path']} | {r['stage']} | "
              f"{r['split']} | "
              f"{val} |")


if __name__ == "__main__":
    main()
