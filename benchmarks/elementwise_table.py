"""Elementwise accuracy of blockattn vs FA v2 (and eager) against the FP64 oracle.

For each shape: % correctly rounded, % faithful, p99.99 ulp and bound violations per tensor,
the numbers the README's "Elementwise accuracy" table shows. Runs wherever the providers run
(FA v2 needs CUDA).

    python benchmarks/elementwise_table.py --out DIR [--providers blockattn,fa2] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SHAPES = [  # (name, CaseSpec kwargs)
    ("B256 L1024 s.7 H4 D128 bf16 normal", dict(B=256, max_len=1024, sparsity=0.7, H=4, D=128,
                                                dtype="bfloat16")),
    ("B256 L1024 s.7 H4 D128 bf16 rotary", dict(variant="rotary", B=256, max_len=1024,
                                                sparsity=0.7, H=4, D=128, dtype="bfloat16")),
    ("B256 L1024 s.7 H4 D64 fp16 normal", dict(B=256, max_len=1024, sparsity=0.7, H=4, D=64,
                                               dtype="float16")),
    ("B256 L1024 s.7 H4 D128 bf16 near_constant", dict(B=256, max_len=1024, sparsity=0.7, H=4,
                                                       D=128, dtype="bfloat16",
                                                       distribution="near_constant")),
    ("B256 L1024 s.7 H4 D128 bf16 scaled_logits", dict(B=256, max_len=1024, sparsity=0.7, H=4,
                                                       D=128, dtype="bfloat16",
                                                       distribution="scaled_logits")),
]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--providers", default="blockattn,fa2")
    ap.add_argument("--tolerances", type=Path, default=None, help="default: newest for device")
    ap.add_argument("--quick", action="store_true", help="B=16 instead of 256 (smoke test)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from blockattn.cases.spec import CaseSpec
    from blockattn.judge import tolerances
    from blockattn.judge.evaluate import evaluate_case
    from blockattn.run import env
    from blockattn.run.execute import device_info, git_commit

    device = env.configure()
    tol = tolerances.load(args.tolerances or tolerances.latest_released(
        tolerances.default_tolerance_dir(), device=device))
    provs = [p for p in args.providers.split(",") if p]
    rows = []
    for name, kw in SHAPES:
        if args.quick:
            kw = {**kw, "B": 16}
        spec = CaseSpec(seed=args.seed, **kw)
        t0 = time.perf_counter()
        rec = evaluate_case(spec, provs, provs[0], provs[-1], tol=tol)
        for p, res in rec["providers"].items():
            if res["status"] != "ok":
                rows.append({"shape": name, "provider": p, "status": res["status"],
                             "reason": res.get("reason")})
                continue
            for t, m in res["tensors"].items():
                u, b = m["ulp"], m["bound"] or {}
                rows.append({"shape": name, "provider": p, "tensor": t, "T": rec["T"],
                             "pct_correctly_rounded": u["pct_correctly_rounded"],
                             "pct_faithful": u["pct_faithful"],
                             "p99_99_ulp": u["quantiles"]["p99.99"], "max_ulp":
                             u["quantiles"]["max"], "violations": b.get("violations"),
                             "model": b.get("model"), "ratio_to_floor": m["ratio_to_floor"]})
        print(f"{name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    info = device_info()
    meta = {**info, "commit": git_commit(), "tolerances": str(tol.path), "seed": args.seed,
            "command": "python benchmarks/elementwise_table.py " + " ".join(sys.argv[1:])}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "elementwise.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    md = [f"{info['gpu']}, commit {meta['commit']}, tolerances {tol.path}", "",
          "| shape | provider | tensor | % correctly rounded | % faithful | p99.99 ulp | max ulp |"
          " violations (own model) |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "tensor" not in r:
            md.append(f"| {r['shape']} | {r['provider']} | - | {r['status']}: {r['reason']} |")
            continue
        md.append(f"| {r['shape']} | {r['provider']} | {r['tensor']} | "
                  f"{r['pct_correctly_rounded']:.2f} | {r['pct_faithful']:.2f} | "
                  f"{r['p99_99_ulp']:.3g} | {r['max_ulp']:.3g} | {r['violations']} |")
    (args.out / "elementwise.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
