"""FP64 oracle outputs for a case, via the `oracles` package (the single source of truth)."""

from __future__ import annotations

import torch

from blockattn.harness.inputs import Inputs


def oracle_outputs(inp: Inputs) -> dict[str, torch.Tensor]:
    import oracles  # lazy: owned elsewhere

    spec = inp.spec
    kw = {"block_size": 64, "scale": spec.scale}
    if spec.variant == "plain":
        o = oracles.block_attention(inp.q, inp.k, inp.v, inp.offsets, **kw)
        dq, dk, dv = oracles.block_attention_backward(
            inp.q, inp.k, inp.v, inp.offsets, inp.grad_out, **kw
        )
        return {"O": o, "dQ": dq, "dK": dk, "dV": dv}
    if spec.variant == "rotary":
        o = oracles.rotary_block_attention(
            inp.q, inp.k, inp.v, inp.offsets, inp.sinu_pos, rotate_v=spec.rotate_v, **kw
        )
        dq, dk, dv = oracles.rotary_block_attention_backward(
            inp.q,
            inp.k,
            inp.v,
            inp.offsets,
            inp.sinu_pos,
            inp.grad_out,
            rotate_v=spec.rotate_v,
            **kw,
        )
        return {"O": o, "dQ": dq, "dK": dk, "dV": dv}
    args = (inp.x, inp.w, inp.bias, inp.sinu_pos, inp.offsets, inp.qheads, inp.kvheads)
    o = oracles.projection_rotary_block_attention(*args, rotate_v=spec.rotate_v, **kw)
    dx, dw, db = oracles.projection_rotary_block_attention_backward(
        *args, inp.grad_out, rotate_v=spec.rotate_v, **kw
    )
    return {"O": o, "dX": dx, "dW": dw, "dbias": db}
