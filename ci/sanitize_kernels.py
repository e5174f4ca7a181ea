"""Launch every blockattn kernel variant once on tiny shapes (run under compute-sanitizer).

Variants: rotary off / on with rotate_v True / False, forward and backward, bf16 / fp16 / fp32,
head_dim 64 / 128, block_size 64 plus 16 and 128 (other BLOCK constexprs), and the strided
(non-contiguous) q/k/v views of projection_rotary_attention. Lengths include an empty sequence,
a single token and partial last blocks, so the masked tail rows and column clamps are exercised.
Exit 0 when every launch finished with finite outputs; prints one line per variant.

Used by ci/sanitize.sh: first without the sanitizer (fills the Triton cache: compiling under the
sanitizer is very slow), then under memcheck and racecheck.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import blockattn
from blockattn.cases.generate import make_case

LENGTHS = [0, 1, 70, 64, 33]  # 5 blocks: 1, 64, 6, 64, 33 tokens
H = 2


def variants() -> list[dict]:
    out = []
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for D in (64, 128):
            for rotary, rotate_v in ((False, True), (True, True), (True, False)):
                out.append(dict(dtype=dtype, D=D, rotary=rotary, rotate_v=rotate_v, bs=64))
    for bs in (16, 128):
        out.append(dict(dtype=torch.bfloat16, D=64, rotary=False, rotate_v=True, bs=bs))
        out.append(dict(dtype=torch.bfloat16, D=64, rotary=True, rotate_v=True, bs=bs))
    return out


def launch(v: dict) -> None:
    if v["dtype"] == torch.float32 and torch.cuda.get_device_capability()[0] >= 10:
        print(f"skip (fp32 rejected on sm_100+): {v}")
        return
    case = make_case(lengths=LENGTHS, H=H, D=v["D"], dtype=v["dtype"], device="cuda", seed=3)
    q, k, v_ = (t.clone().requires_grad_(True) for t in (case.q, case.k, case.v))
    sinu = case.sinu_pos if v["rotary"] else None
    o = blockattn.block_attention(
        q, k, v_, case.offsets, block_size=v["bs"], sinu_pos=sinu, rotate_v=v["rotate_v"]
    )
    o.backward(case.grad_out)
    torch.cuda.synchronize()
    for name, t in (("O", o), ("dQ", q.grad), ("dK", k.grad), ("dV", v_.grad)):
        if not torch.isfinite(t).all():
            raise SystemExit(f"non-finite {name} for {v}")
    label = {**v, "dtype": str(v["dtype"]).removeprefix("torch.")}
    print(f"ok fwd+bwd {label}", flush=True)


def launch_projection() -> None:
    # q, k, v are strided views into one (T, 3*H*D) projection: token stride 3*H*D.
    case = make_case(lengths=LENGTHS, H=H, D=64, dtype=torch.bfloat16, device="cuda", seed=4)
    T = case.q.shape[0]
    g = torch.Generator(device="cuda").manual_seed(4)
    x = torch.randn(T, 32, generator=g, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    w = torch.randn(32, 3 * H * 64, generator=g, device="cuda", dtype=torch.bfloat16) * 0.2
    w.requires_grad_(True)
    o = blockattn.projection_rotary_attention(x, w, case.sinu_pos, case.offsets, qheads=H)
    o.backward(case.grad_out)
    torch.cuda.synchronize()
    if not (torch.isfinite(o).all() and torch.isfinite(x.grad).all()):
        raise SystemExit("non-finite projection outputs")
    print("ok fwd+bwd projection_rotary_attention (strided q/k/v views)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the variants and exit")
    ap.add_argument("--shard", default="0/1", help="I/N: run variants I, I+N, ... (cache warm-up)")
    args = ap.parse_args()
    i, n = (int(x) for x in args.shard.split("/"))
    vs = variants()[i::n]
    if args.list:
        print("\n".join(map(str, vs)))
        return 0
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    for v in vs:
        launch(v)
    if i == 0:
        launch_projection()
    print(f"launched {len(vs) + 1} variants (fwd + bwd each) on {torch.cuda.get_device_name()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
