"""`blockattn compile-check`: AOT-build every kernel variant for sm_90a and sm_100a on CPU."""

from __future__ import annotations

import argparse
import json
import os
import time

HELP = (
    "AOT-compile every kernel variant for Hopper (sm_90a) and Blackwell (sm_100a) without a GPU; "
    "check tensor-core MMAs, register spills and shared memory."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--variants",
        default=None,
        help="comma-separated globs on variant names, e.g. 'fwd-bf16-*,bwd-*-d128-rot' "
        "(names: {fwd,bwd}-{bf16,fp16,fp32}-d{64,128}-{off,rot,rot-qk}"
        "[-hopper|-gluon|-gluon2|-gfast|-gluon-lean|-bs128]; -bs128: 128-row tiles; "
        "default: all)",
    )
    parser.add_argument(
        "--targets",
        default="sm_90,sm_100",
        help="comma-separated targets among sm_90, sm_100 (default: both)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,  # resolved at run time: the reference page must not depend on the machine
        help="worker processes (default: CPU count)",
    )
    parser.add_argument("--json", metavar="PATH", default=None, help="also write results as JSON")
    parser.add_argument("--list", action="store_true", help="list matching variants and exit")


def main(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from blockattn.kernels.compile_check import format_markdown, run_check, select_variants

    variants = select_variants(args.variants)
    if args.list:
        print("\n".join(v.name for v in variants))
        return 0
    if args.jobs is None:
        args.jobs = os.cpu_count() or 1
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    t0 = time.perf_counter()
    results = run_check(variants, targets, jobs=args.jobs)
    wall = time.perf_counter() - t0
    print(format_markdown(results))
    print(f"wall time {wall:.1f} s with {args.jobs} worker(s)")
    if args.json:
        payload = {
            "wall_s": round(wall, 1),
            "jobs": args.jobs,
            "results": [asdict(r) | {"ok": r.ok} for r in results],
        }
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=2)
    return 0 if all(r.ok for r in results) else 1
