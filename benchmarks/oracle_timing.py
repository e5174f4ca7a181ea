"""Time the FP64 oracles (forward + closed-form backward) on the production shape P.

P: B=1152 sequences, max_len 4096, sparsity 0.7 (mean length ~1229, ~1.4 M tokens, ~22.7k
blocks of 64), H=4, D=128, bf16 inputs, seed 0, built with `make_case(..., device="cuda")`.
Goal: <= 2 s total (forward + backward) on one H100/H200.

    python benchmarks/oracle_timing.py            # production shape on CUDA
    python benchmarks/oracle_timing.py --small    # quick smoke run (CPU unless CUDA is there)

Prints one JSON object. Wall clock with torch.cuda.synchronize() around each timed call;
median of --repeats runs after one warm-up run (cuBLAS handles, allocator pool).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a plain checkout too

import oracles
from blockattn.cases.generate import make_case

PRODUCTION = {"B": 1152, "max_len": 4096, "sparsity": 0.7, "H": 4, "D": 128}
SMALL = {"B": 8, "max_len": 256, "sparsity": 0.5, "H": 2, "D": 64}
GOAL_TOTAL_S = 2.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - t0, out


def time_variant(case: Any, rotary: bool, repeats: int, device: torch.device) -> dict[str, Any]:
    q, k, v, g, off, sinu = case.q, case.k, case.v, case.grad_out, case.offsets, case.sinu_pos
    if rotary:
        fwd = lambda: oracles.rotary_block_attention(q, k, v, off, sinu)
        bwd = lambda: oracles.rotary_block_attention_backward(q, k, v, off, sinu, g)
    else:
        fwd = lambda: oracles.block_attention(q, k, v, off)
        bwd = lambda: oracles.block_attention_backward(q, k, v, off, g)
    fwd_s, bwd_s = [], []
    for i in range(repeats + 1):  # run 0 is the warm-up
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        tf, out = _timed(fwd, device)
        finite = bool(torch.isfinite(out).all())
        del out  # keep the forward output out of the backward's peak
        tb, grads = _timed(bwd, device)
        finite = finite and all(bool(torch.isfinite(t).all()) for t in grads)
        del grads
        if not finite:
            raise RuntimeError("oracle produced non-finite values")
        if i > 0:
            fwd_s.append(tf)
            bwd_s.append(tb)
    res = {
        "fwd_s": statistics.median(fwd_s),
        "bwd_s": statistics.median(bwd_s),
        "fwd_all_s": fwd_s,
        "bwd_all_s": bwd_s,
    }
    res["total_s"] = res["fwd_s"] + res["bwd_s"]
    if device.type == "cuda":
        res["peak_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="small shape for a quick smoke run")
    ap.add_argument(
        "--device",
        default=None,
        help="default: cuda if available (required "
        "for the production shape), else cpu with --small",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-rotary", action="store_true", help="skip the rotary variant")
    args = ap.parse_args(argv)

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "CUDA requested but not available"}))
        return 2
    if not args.small and device.type != "cuda":
        print(json.dumps({"error": "the production shape needs CUDA; use --small on CPU"}))
        return 2
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")

    shape = SMALL if args.small else PRODUCTION
    t0 = time.perf_counter()
    case = make_case(**shape, dtype=torch.bfloat16, device=device, seed=0)
    build_s = time.perf_counter() - t0
    lengths = torch.tensor(case.params["lengths"])
    report: dict[str, Any] = {
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "shape": {
            **shape,
            "dtype": "bfloat16",
            "seed": 0,
            "T": int(lengths.sum()),
            "mean_len": float(lengths.double().mean()),
            "n_blocks": int(((lengths + 63) // 64).sum()),
        },
        "case_build_s": build_s,
        "repeats": args.repeats,
        "goal_total_s": GOAL_TOTAL_S,
    }
    report["block_attention"] = time_variant(case, False, args.repeats, device)
    if not args.no_rotary:
        report["rotary_block_attention"] = time_variant(case, True, args.repeats, device)
    # Headline numbers: plain block attention oracle.
    for key in ("fwd_s", "bwd_s", "total_s", "peak_mem_gib"):
        if key in report["block_attention"]:
            report[key] = report["block_attention"][key]
    # The goal is defined for the production shape only.
    report["meets_goal"] = None if args.small else report["total_s"] <= GOAL_TOTAL_S
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
