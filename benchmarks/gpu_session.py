"""One GPU session: accuracy at shape P (blockattn and FA v2 vs the FP64 oracle), oracle timing,
and quick same-run timings against FA v2 and the device copy ceiling.

    python benchmarks/gpu_session.py --out DIR [--quick]

Writes DIR/gpu_session.json (streamed after every step, so a timeout keeps what finished) and
prints Markdown tables last. Accuracy metric: max |x - oracle| over the whole tensor; the
"rounding floor" is max |round_to_dtype(oracle) - oracle|; ratio = max err / floor
(1.00 = as accurate as the output dtype allows).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import time
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

import oracles
from blockattn import block_attention
from blockattn.cases.generate import make_case
from blockattn.kernels.dispatch import attention_bwd, attention_fwd
from blockattn.kernels.tiles import build_tile_table
from blockattn.providers._common import rotary as eager_rotary
from blockattn.providers.fa2 import _attention as fa2_attention
from blockattn.providers.fa2 import active_flash_impl

P = dict(B=1152, max_len=4096, sparsity=0.7, H=4)
SMALL = dict(B=256, max_len=1024, sparsity=0.7, H=4)
NAMES = ("O", "dQ", "dK", "dV")


def _commit() -> str:
    if os.environ.get("BLOCKATTN_GIT_COMMIT"):
        return os.environ["BLOCKATTN_GIT_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True).strip()
    except Exception:
        return "unknown"


def _metrics(got: torch.Tensor, ref: torch.Tensor) -> dict:
    err = (got.double() - ref).abs()
    floor = (ref.to(got.dtype).double() - ref).abs().max().item()
    m = err.max().item()
    return {
        "max_err": m,
        "floor": floor,
        "ratio": m / floor if floor > 0 else float("inf"),
        "nonfinite": int((~torch.isfinite(got)).sum()),
    }


def _run_autograd(fn, case, rotary: bool):
    q, k, v = (t.detach().clone().requires_grad_() for t in (case.q, case.k, case.v))
    o = fn(q, k, v, rotary)
    o.backward(case.grad_out)
    return o.detach(), q.grad, k.grad, v.grad


def accuracy(shape: dict, D: int, dtype: torch.dtype, rotary: bool, seed: int) -> dict:
    case = make_case(**shape, D=D, dtype=dtype, device="cuda", seed=seed)
    scale = 1 / math.sqrt(D)
    sinu = case.sinu_pos if rotary else None

    def ours(q, k, v, rot):
        return block_attention(q, k, v, case.offsets, sinu_pos=sinu)

    def fa2(q, k, v, rot):
        if rot:  # rotary outside, in the input dtype (what a user of FA v2 would do)
            q, k, v = (eager_rotary(t, case.sinu_pos) for t in (q, k, v))
        return fa2_attention(q, k, v, case.offsets, scale)

    got = _run_autograd(ours, case, rotary)
    base = _run_autograd(fa2, case, rotary)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    args = (case.q, case.k, case.v, case.offsets)
    if rotary:
        ref = (
            oracles.rotary_block_attention(*args, case.sinu_pos),
            *oracles.rotary_block_attention_backward(*args, case.sinu_pos, case.grad_out),
        )
    else:
        ref = (
            oracles.block_attention(*args),
            *oracles.block_attention_backward(*args, case.grad_out),
        )
    torch.cuda.synchronize()
    oracle_s = time.perf_counter() - t0
    row = {
        "T": int(case.offsets[-1]),
        "shape": shape,
        "D": D,
        "dtype": str(dtype),
        "rotary": rotary,
        "seed": seed,
        "oracle_fwd_bwd_s": oracle_s,
        "tensors": {},
    }
    for name, g, b, r in zip(NAMES, got, base, ref, strict=True):
        mg, mb = _metrics(g, r), _metrics(b, r)
        row["tensors"][name] = {
            "blockattn": mg,
            "fa2": mb,
            "err_vs_fa2": mg["max_err"] / max(mb["max_err"], 1e-300),
        }
    del ref, got, base
    torch.cuda.empty_cache()
    return row


def copy_ceiling(numel: int) -> float:
    """Bytes/s of a device-to-device bf16 copy of `numel` elements (read + written)."""
    src = torch.randn(numel, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    return 2 * numel * 2 / (ms * 1e-3)


def timings(D: int) -> dict:
    case = make_case(**P, D=D, dtype=torch.bfloat16, device="cuda", seed=1)
    q, k, v, do, off = case.q, case.k, case.v, case.grad_out, case.offsets
    T = q.shape[0]
    scale = 1 / math.sqrt(D)
    tbytes = q.numel() * q.element_size()
    # Copy ceiling: a device-to-device copy of ~4 tensors' worth, bytes read + written.
    ceiling = copy_ceiling(4 * q.numel())
    table = build_tile_table(off, T, 64)
    o = attention_fwd(q, k, v, table, None, scale, 64, True)
    res = {"D": D, "T": T, "copy_ceiling_TBps": ceiling / 1e12}

    def rec(name, fn, passes, extra_bytes=0):
        ms = do_bench(fn, warmup=50, rep=300, return_mode="median")
        nbytes = passes * tbytes + extra_bytes
        res[name] = {
            "ms": ms,
            "TBps": nbytes / (ms * 1e-3) / 1e12,
            "pct_ceiling": 100 * nbytes / (ms * 1e-3) / ceiling,
        }

    sbytes = case.sinu_pos.numel() * case.sinu_pos.element_size()
    rec("blockattn_fwd", lambda: attention_fwd(q, k, v, table, None, scale, 64, True, out=o), 4)
    rec(
        "blockattn_fwd_rotary",
        lambda: attention_fwd(q, k, v, table, case.sinu_pos, scale, 64, True, out=o),
        4,
        sbytes,
    )
    grads = tuple(torch.empty_like(q) for _ in range(3))
    rec(
        "blockattn_bwd",
        lambda: attention_bwd(q, k, v, do, table, None, scale, 64, True, grads=grads),
        7,
    )
    rec(
        "blockattn_bwd_rotary",
        lambda: attention_bwd(q, k, v, do, table, case.sinu_pos, scale, 64, True, grads=grads),
        7,
        sbytes,
    )
    rec("tile_table", lambda: build_tile_table(off, T, 64), 0)
    # FA v2 with cu_seqlens cut at every 64-token block.
    from blockattn.providers._common import block_cu_seqlens

    cu = block_cu_seqlens(off)
    out, lse, rng, unused, _ = torch.ops.aten._flash_attention_forward(
        q, k, v, cu, cu, 64, 64, 0.0, False, False, scale=scale
    )
    rec(
        "fa2_fwd",
        lambda: torch.ops.aten._flash_attention_forward(
            q, k, v, cu, cu, 64, 64, 0.0, False, False, scale=scale
        ),
        4,
    )
    rec(
        "fa2_bwd",
        lambda: torch.ops.aten._flash_attention_backward(
            do, q, k, v, out, lse, cu, cu, 64, 64, 0.0, False, rng, unused, scale=scale
        ),
        7,
    )
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    doc = {
        "gpu": torch.cuda.get_device_name(0),
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "commit": _commit(),
        "flash_impl": active_flash_impl(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "accuracy": [],
        "timings": [],
    }

    def save():
        (out / "gpu_session.json").write_text(json.dumps(doc, indent=1))

    save()
    plan = [(P, 128, torch.bfloat16, False), (P, 128, torch.bfloat16, True)]
    if not args.quick:
        plan += [
            (P, 64, torch.bfloat16, False),
            (P, 128, torch.float16, False),
            (P, 64, torch.float16, False),
            (P, 128, torch.float16, True),
        ]
        plan += [(SMALL, D, dt, False) for D in (128, 64) for dt in (torch.bfloat16, torch.float16)]
    for shape, D, dt, rot in plan:
        t0 = time.time()
        try:
            doc["accuracy"].append(accuracy(shape, D, dt, rot, seed=0))
        except Exception as exc:  # keep going: one failure must not lose the rest
            doc["accuracy"].append(
                {"shape": shape, "D": D, "dtype": str(dt), "rotary": rot, "error": repr(exc)[:2000]}
            )
        print(f"accuracy {shape['B']} D{D} {dt} rot={rot}: {time.time() - t0:.1f}s", flush=True)
        save()
    for D in (128, 64):
        try:
            doc["timings"].append(timings(D))
        except Exception as exc:
            doc["timings"].append({"D": D, "error": repr(exc)[:2000]})
        save()
    print(
        f"\n## {doc['gpu']} torch {doc['torch']} triton {doc['triton']} commit {doc['commit']}"
        f" flash_impl={doc['flash_impl']}"
    )
    print(
        "\n| shape | D | dtype | rot | tensor | blockattn ratio | fa2 ratio | err/fa2 | oracle s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in doc["accuracy"]:
        if "error" in r:
            print(
                f"| {r['shape']['B']} | {r['D']} | {r['dtype']} | {r['rotary']} | ERROR "
                f"{r['error'][:300]} |"
            )
            continue
        for name, t in r["tensors"].items():
            print(
                f"| B{r['shape']['B']} T{r['T']} | {r['D']} | {r['dtype'][6:]} | {r['rotary']} "
                f"| {name} | {t['blockattn']['ratio']:.3f} | {t['fa2']['ratio']:.3f} | "
                f"{t['err_vs_fa2']:.3f} | {r['oracle_fwd_bwd_s']:.2f} |"
            )
    for t in doc["timings"]:
        print(f"\nTimings D={t.get('D')}: " + json.dumps(t, indent=None)[:3000])
    os.sync()


if __name__ == "__main__":
    main()
