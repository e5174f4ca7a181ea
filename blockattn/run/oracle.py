"""FP64 oracle outputs for a case, via the `oracles` package (the single source of truth)."""

from __future__ import annotations

import torch

from blockattn.cases.inputs import Inputs


def oracle_outputs(inp: Inputs) -> dict[str, torch.Tensor]:
    import oracles  # lazy: owned elsewhere

    spec = inp.spec
    kw = {"block_size": spec.block_size, "scale": spec.scale}
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


def oracle_bounds(inp: Inputs, models: list[dict]) -> list[dict[str, torch.Tensor]]:
    """Per model (resolved for the case dtype), per output: the FP64 analysis' error bound E
    (`oracles.error_bound`), on the case's device, before each output's final store."""
    from oracles import error_bound

    spec = inp.spec
    kw = {"block_size": spec.block_size, "scale": spec.scale, "rotate_v": spec.rotate_v,
          "models": models}
    if spec.variant == "projection":
        return error_bound.projection_error_bounds(
            inp.x, inp.w, inp.bias, inp.sinu_pos, inp.offsets, inp.qheads, inp.kvheads,
            inp.grad_out, **kw,
        )  # fmt: skip
    sinu = inp.sinu_pos if spec.variant == "rotary" else None
    return error_bound.attention_error_bounds(
        inp.q, inp.k, inp.v, inp.offsets, inp.grad_out, sinu_pos=sinu, **kw
    )
