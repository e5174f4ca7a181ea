"""Diagnose the Hopper path's rotary D128 forward against the portable one and an FP64
reference, many tiles (more than 2 programs per SM): is the difference rounding or a bug?

    python benchmarks/diag_hopper_rot.py [--rotate-v]
"""

from __future__ import annotations

import sys

import torch

from blockattn.kernels import attention as A
from blockattn.kernels import attention_hopper as AH
from blockattn.kernels.tiles import build_tile_table

LENGTHS = [100, 37, 64, 5] * 60
H, D = 2, 128


def ref_fwd(q, k, v, sinu, off, rotate_v):
    def rot(x):
        x = x.double()
        s, c = sinu[:, : D // 2].double()[:, None], sinu[:, D // 2 :].double()[:, None]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y = torch.empty_like(x)
        y[..., 0::2] = x0 * c - x1 * s
        y[..., 1::2] = x1 * c + x0 * s
        return y
    qr, kr = rot(q), rot(k)
    vr = rot(v) if rotate_v else v.double()
    o = torch.zeros_like(qr)
    for b in range(len(off) - 1):
        for s0 in range(int(off[b]), int(off[b + 1]), 64):
            e = min(s0 + 64, int(off[b + 1]))
            sc = torch.einsum("thd,uhd->htu", qr[s0:e], kr[s0:e]) * D**-0.5
            p = sc.softmax(-1)
            o[s0:e] = torch.einsum("htu,uhd->thd", p, vr[s0:e])
    return o


def main() -> int:
    rotate_v = "--rotate-v" in sys.argv
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(3)
    off = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], device=dev)
    T = int(off[-1])
    q, k, v = (torch.randn(T, H, D, device=dev, generator=g).to(torch.bfloat16) for _ in range(3))
    sinu = torch.rand(T, D, device=dev, generator=g) * 2 - 1
    table = build_tile_table(off, T, 64)
    o_p = torch.full_like(q, float("nan"))
    o_h = torch.full_like(q, float("nan"))
    A.launch_fwd(q, k, v, table, sinu, D**-0.5, 64, rotate_v, o_p)
    AH.launch_fwd(q, k, v, o_h, table, sinu, D**-0.5, 64, rotate_v)
    ref = ref_fwd(q, k, v, sinu, off.tolist(), rotate_v)
    ulp = torch.finfo(torch.bfloat16).eps * ref.abs().clamp_min(1e-30)
    for name, o in (("portable", o_p), ("hopper", o_h)):
        err = (o.double() - ref).abs() / ulp
        print(f"{name}: finite {bool(torch.isfinite(o).all())}, max err {err.max():.2f} ulp, "
              f"> 1 ulp: {int((err > 1).sum())} of {err.numel()}")
    d = (o_h.double() - o_p.double()).abs()
    i = int(d.argmax())
    print(f"hopper vs portable: max |diff| {d.max():.3e} at {divmod(i, H * D)}, "
          f"values {o_h.flatten()[i].item()} vs {o_p.flatten()[i].item()}, "
          f"ref {ref.flatten()[i].item():.6g}; differing elements {int((d > 0).sum())}")
    bad = (d > 0).any(-1).any(-1).nonzero().flatten()
    print("first differing tokens:", bad[:20].tolist())
    return 0


if __name__ == "__main__":
    sys.exit(main())
