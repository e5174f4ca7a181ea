"""`blockattn`: the Triton kernels under test (plain, fused rotary, fused projection)."""

from __future__ import annotations

import torch

from blockattn.providers import Supports, Unsupported

NAME = "blockattn"
ROLE = "kernel"
# FP32 arithmetic, 16-bit MMA operands as hi + lo halves, one rounding at the store
ACCURACY_MODEL = "fp32-split-operands"
# bf16/fp16 (production) and fp32 (the reference path); the kernels reject GQA and other head dims
SUPPORTS = Supports(head_dims=(64, 128), gqa=False)  # block_size 1..128; the suite uses 64


def run(inputs, variant: str) -> dict[str, torch.Tensor]:
    import blockattn  # lazy: TRITON_INTERPRET must be set before the kernels are imported

    spec = inputs.spec
    if spec.D not in (64, 128):
        raise Unsupported(f"blockattn supports D in {{64, 128}}, got D={spec.D}")
    if variant == "projection" and inputs.kvheads != inputs.qheads:
        raise Unsupported(f"blockattn has no GQA (kvheads={inputs.kvheads} != {inputs.qheads})")
    if variant == "projection":
        x = inputs.x.detach().clone().requires_grad_(True)
        w = inputs.w.detach().clone().requires_grad_(True)
        b = inputs.bias.detach().clone().requires_grad_(True)
        o = blockattn.projection_rotary_attention(
            x,
            w,
            inputs.sinu_pos,
            inputs.offsets,
            qheads=inputs.qheads,
            kvheads=inputs.kvheads,
            bias=b,
            block_size=64,
            scale=spec.scale,
            rotate_v=spec.rotate_v,
        )
        dx, dw, db = torch.autograd.grad(o, (x, w, b), inputs.grad_out)
        return {"O": o.detach(), "dX": dx, "dW": dw, "dbias": db}
    q = inputs.q.detach().clone().requires_grad_(True)
    k = inputs.k.detach().clone().requires_grad_(True)
    v = inputs.v.detach().clone().requires_grad_(True)
    o = blockattn.block_attention(
        q,
        k,
        v,
        inputs.offsets,
        block_size=64,
        scale=spec.scale,
        sinu_pos=inputs.sinu_pos if variant == "rotary" else None,
        rotate_v=spec.rotate_v,
    )
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), inputs.grad_out)
    return {"O": o.detach(), "dQ": dq, "dK": dk, "dV": dv}
