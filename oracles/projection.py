"""FP64 reference for QKV projection -> rotary -> block attention, with GQA.

proj = x @ w (+ bias); q, k, v are consecutive column groups of qheads*D, kvheads*D, kvheads*D.
Query head h reads kv head h // (qheads // kvheads); the backward sums the k/v gradients over
the query heads of each group.
"""

from __future__ import annotations

import torch
from torch import Tensor

from oracles import _validate as val
from oracles.attention import rotary_block_attention, rotary_block_attention_backward


def _project(
    x: Tensor,
    w: Tensor,
    bias: Tensor | None,
    sinu_pos: Tensor,
    offsets: Tensor,
    qheads: int,
    kvheads: int,
) -> tuple[Tensor, Tensor, Tensor, int]:
    """Validate, project in FP64 and return (q, k_expanded, v_expanded, group)."""
    val.check_float_tensor(x, "x", 2)
    val.check_float_tensor(w, "w", 2)
    if bias is not None:
        val.check_float_tensor(bias, "bias", 1)
    qheads = val.check_positive_int(qheads, "qheads")
    kvheads = val.check_positive_int(kvheads, "kvheads")
    if qheads % kvheads != 0:
        raise ValueError(f"qheads={qheads} must be a multiple of kvheads={kvheads}")
    if w.shape[0] != x.shape[1]:
        raise ValueError(f"w must have shape (d_in={x.shape[1]}, ...), got {tuple(w.shape)}")
    n_heads = qheads + 2 * kvheads
    if w.shape[1] % n_heads != 0 or w.shape[1] == 0:
        raise ValueError(
            f"w.shape[1]={w.shape[1]} must be (qheads + 2*kvheads) * D = {n_heads} * D"
        )
    D = w.shape[1] // n_heads
    if bias is not None and tuple(bias.shape) != (w.shape[1],):
        raise ValueError(f"bias must have shape ({w.shape[1]},), got {tuple(bias.shape)}")
    T = x.shape[0]
    val.check_sinu_pos(sinu_pos, T, D)
    val.check_same_device(x=x, w=w, bias=bias, sinu_pos=sinu_pos, offsets=offsets)

    proj = x.double() @ w.double()
    if bias is not None:
        proj = proj + bias.double()
    q = proj[:, : qheads * D].reshape(T, qheads, D)
    k = proj[:, qheads * D : (qheads + kvheads) * D].reshape(T, kvheads, D)
    v = proj[:, (qheads + kvheads) * D :].reshape(T, kvheads, D)
    group = qheads // kvheads
    # repeat_interleave: expanded head h is kv head h // group.
    return q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), group


def projection_rotary_block_attention(
    x: Tensor,
    w: Tensor,
    bias: Tensor | None,
    sinu_pos: Tensor,
    offsets: Tensor,
    qheads: int,
    kvheads: int,
    *,
    rotate_v: bool = True,
    block_size: int = 64,
    scale: float | None = None,
) -> Tensor:
    """FP64 output (T, qheads, D)."""
    q, k, v, _ = _project(x, w, bias, sinu_pos, offsets, qheads, kvheads)
    return rotary_block_attention(
        q, k, v, offsets, sinu_pos, rotate_v=rotate_v, block_size=block_size, scale=scale
    )


def projection_rotary_block_attention_backward(
    x: Tensor,
    w: Tensor,
    bias: Tensor | None,
    sinu_pos: Tensor,
    offsets: Tensor,
    qheads: int,
    kvheads: int,
    grad_out: Tensor,
    *,
    rotate_v: bool = True,
    block_size: int = 64,
    scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """FP64 (dx, dw, dbias); dbias is None when bias is None."""
    q, k, v, group = _project(x, w, bias, sinu_pos, offsets, qheads, kvheads)
    T, kvh, D = x.shape[0], k.shape[1] // group, q.shape[-1]
    if grad_out is None:
        raise TypeError("grad_out must be a torch.Tensor, got NoneType")
    dq, dk, dv = rotary_block_attention_backward(
        q, k, v, offsets, sinu_pos, grad_out, rotate_v=rotate_v, block_size=block_size, scale=scale
    )
    # Expanded head kv*group + g belongs to kv head kv: sum over g.
    dk = dk.reshape(T, kvh, group, D).sum(dim=2)
    dv = dv.reshape(T, kvh, group, D).sum(dim=2)
    # Explicit widths: reshape(T, -1) is ambiguous when T == 0 (an all-empty batch).
    dproj = torch.cat(
        (dq.reshape(T, qheads * D), dk.reshape(T, kvh * D), dv.reshape(T, kvh * D)), dim=1
    )
    dx = dproj @ w.double().T
    dw = x.double().T @ dproj
    dbias = dproj.sum(dim=0) if bias is not None else None
    return dx, dw, dbias
