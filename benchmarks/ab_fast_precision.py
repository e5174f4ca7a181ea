"""Same-run A/B of the fast precision mode (`precision="fast"`) against the accurate default, at
shape P (B=1152, max_len=4096, sparsity 0.7, H=4), bf16, D=128 and D=64, on one GPU.

    python3 benchmarks/ab_fast_precision.py --out DIR [--rounds 3] [--configs]

Timed per round (medians over rounds; `triton.testing.do_bench` medians within a round):
- plain (as is): blockattn's default plain kernels (the accurate mode);
- plain fast: the plain kernels in the fast mode (the same precision as the fast rotary);
- rotary accurate: the default fused-rotary kernels;
- rotary fast: fp32 sin/cos table, and the table in the input dtype (the caller's bf16 table);
and a device-to-device copy ceiling in the same run. `--configs` also times launch-config
variants of the Gluon fast rotary kernels (attention_gluon_rotary_fast.CONFIGS) to pick one; the
portable fast kernels are timed beside them (`*_portable`) and their outputs compared.
Writes DIR/ab_fast.json and DIR/ab_fast.md (ratios to both plain kernels, % of the ceiling).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

import torch


def _spills() -> list[dict]:
    """Registers and spills of every portable kernel this process compiled (fast ones flagged)."""
    from blockattn.kernels import attention as A

    out = []
    for fn in (A._fwd_kernel, A._bwd_kernel):
        for cache in getattr(fn, "device_caches", {}).values():
            for k in cache[0].values():
                try:
                    const = {str(kk): vv for kk, vv in k.src.constants.items()}
                except Exception:  # diagnostics only
                    const = {}
                out.append({"kernel": fn.__name__, "n_regs": getattr(k, "n_regs", None),
                            "n_spills": getattr(k, "n_spills", None),
                            "constants": {c: v for c, v in const.items()
                                          if not isinstance(v, torch.dtype)}})  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", action="store_true")
    ap.add_argument("--head-dims", default="128,64")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import triton.testing

    from blockattn.bench.case import make_bench_case
    from blockattn.bench.measure import copy_ceiling
    from blockattn.kernels import attention as A
    from blockattn.kernels import attention_gluon_rotary_fast as GF
    from blockattn.kernels.dispatch import attention_bwd, attention_fwd
    from blockattn.kernels.tiles import build_tile_table

    dev = torch.device("cuda")
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "triton": __import__("triton").__version__,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True).stdout.strip() or "unknown"}  # fmt: skip
    print(meta, flush=True)
    rows: dict[str, list[float]] = {}
    ceilings = []

    def t(fn) -> float:
        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))

    cases = {}
    for D in (int(d) for d in args.head_dims.split(",")):
        c = make_bench_case("P", B=1152, max_len=4096, sparsity=0.7, H=4, D=D,
                            dtype=torch.bfloat16, device=dev)  # fmt: skip
        table = build_tile_table(c.offsets, c.T, 64, c.max_len)
        cases[D] = (c, table, c.sinu.to(torch.bfloat16))
    variants = {}
    if args.configs:
        variants = {"fwd_rot_3ctas": ("fwd", True, (3, 168))}
    def time_case(D: int, c, table, sinu16) -> None:
        q, k, v, do, s = c.q, c.k, c.v, c.do, c.scale
        entries = {
            "plain": (None, "accurate"),
            "plain_fast": (None, "fast"),
            "rotary": (c.sinu, "accurate"),
            "rotary_fast": (c.sinu, "fast"),
            "rotary_fast_tbl16": (sinu16, "fast"),
        }
        o_buf = torch.empty_like(q)
        g_buf = tuple(torch.empty_like(q) for _ in range(3))
        for name, sinu in (("plain_fast_portable", None), ("rotary_fast_portable", c.sinu)):
            rows.setdefault(f"D{D} fwd {name}", []).append(t(
                lambda sinu=sinu: A.launch_fwd(q, k, v, table, sinu, s, 64, True, o_buf,
                                               fast=True)))
            rows.setdefault(f"D{D} bwd {name}", []).append(t(
                lambda sinu=sinu: A.launch_bwd(q, k, v, do, table, sinu, s, 64, True, g_buf,
                                               fast=True)))
        for name, (sinu, prec) in entries.items():
            rows.setdefault(f"D{D} fwd {name}", []).append(t(
                lambda sinu=sinu, prec=prec: attention_fwd(q, k, v, table, sinu, s, 64, True,
                                                           precision=prec)))
            rows.setdefault(f"D{D} bwd {name}", []).append(t(
                lambda sinu=sinu, prec=prec: attention_bwd(q, k, v, do, table, sinu, s, 64, True,
                                                           precision=prec)))
        for vname, (kern, rot, cfg) in variants.items():
            key = (kern, rot, D)
            old = GF.CONFIGS.get(key)
            GF.CONFIGS[key] = cfg
            try:
                fn = attention_fwd if kern == "fwd" else attention_bwd
                extra = () if kern == "fwd" else (do,)
                rows.setdefault(f"D{D} {kern} rotary_fast[{vname}]", []).append(t(
                    lambda fn=fn, extra=extra: fn(q, k, v, *extra, table, c.sinu, s, 64, True,
                                                  precision="fast")))
            except Exception as exc:  # a config that does not build
                print(f"{vname} D{D}: {exc}", flush=True)
            finally:
                if old is None:
                    GF.CONFIGS.pop(key, None)
                else:
                    GF.CONFIGS[key] = old

    agree = {}
    for D, (c, table, _) in cases.items():  # the Gluon fast kernels against the portable ones
        q, k, v, do, s = c.q, c.k, c.v, c.do, c.scale
        for name, sinu in (("plain", None), ("rotary", c.sinu)):
            got = (attention_fwd(q, k, v, table, sinu, s, 64, True, precision="fast"),
                   *attention_bwd(q, k, v, do, table, sinu, s, 64, True, precision="fast"))
            ref = (A.launch_fwd(q, k, v, table, sinu, s, 64, True, torch.empty_like(q),
                                fast=True),
                   *A.launch_bwd(q, k, v, do, table, sinu, s, 64, True,
                                 tuple(torch.empty_like(q) for _ in range(3)), fast=True))
            for tn, a, b in zip(("O", "dQ", "dK", "dV"), got, ref, strict=True):
                a, b = a.float(), b.float()
                ulp = torch.finfo(torch.bfloat16).eps * b.abs().clamp_min(2.0**-126)
                far = ((a - b).abs() > 1.01 * ulp) & ((a - b).abs() > 0)
                agree[f"D{D} {name} {tn}"] = {
                    "max_abs_diff": float((a - b).abs().max()),
                    "elements_over_1ulp": int(far.sum()), "n": a.numel(),
                    "nonfinite": int((~torch.isfinite(a)).sum())}
    print("gluon fast vs portable fast:", json.dumps(agree), flush=True)
    for r in range(args.rounds):
        ceilings.append(copy_ceiling(2 << 30, 25, 100, False)["tbps"])
        for D, (c, table, sinu16) in cases.items():
            time_case(D, c, table, sinu16)
        print(f"round {r}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in rows.items()), flush=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    ceil = statistics.median(ceilings)
    lines_agree = [f"- {k}: {v['elements_over_1ulp']} of {v['n']} elements more than 1 ulp "
                   f"apart (max |diff| {v['max_abs_diff']:.3g}, non-finite {v['nonfinite']})"
                   for k, v in agree.items()]
    lines = [f"# fast precision A/B, shape P bf16, {meta['gpu']}", "",
             f"{meta}; medians of {args.rounds} rounds; copy ceiling {ceil:.3f} TB/s (median)", "",
             "| D | pass | entry | ms | % ceiling | / plain (as is) | / plain fast |",
             "|---|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for key, ms in med.items():
        D, ps, name = key.split(" ", 2)
        c = cases[int(D[1:])][0]
        nbytes = (4 if ps == "fwd" else 7) * c.tensor_bytes()
        pct = nbytes / (ms * 1e-3) / 1e12 / ceil * 100
        base, fast = med[f"{D} {ps} plain"], med[f"{D} {ps} plain_fast"]
        lines.append(f"| {D} | {ps} | {name} | {ms:.3f} | {pct:.1f} | {ms / base:.3f} | "
                     f"{ms / fast:.3f} |")
    lines += ["", "Gluon fast kernels (the sm_90 default) against the portable fast kernels, same "
              "inputs:", "", *lines_agree]
    md = "\n".join(lines) + "\n"
    print(md, flush=True)
    (args.out / "ab_fast.md").write_text(md)
    (args.out / "ab_fast.json").write_text(json.dumps(
        {"meta": meta, "rounds": rows, "medians": med, "ceiling_tbps": ceilings, "agree": agree,
         "kernels": _spills()}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
