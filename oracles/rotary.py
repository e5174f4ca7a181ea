"""FP64 reference for rotary embedding in the production `[sin | cos]` table layout.

Pair i of the head dim is (x[2i], x[2i+1]); it uses sin_i = sinu_pos[:, i] and
cos_i = sinu_pos[:, D/2 + i]. The backward is the transpose of the forward linear map, so it
is valid for ANY table (no sin^2 + cos^2 = 1 assumption).
"""

from __future__ import annotations

import torch
from torch import Tensor

from oracles import _validate as val


def _split_sinu(sinu: Tensor) -> tuple[Tensor, Tensor]:
    half = sinu.shape[-1] // 2
    return sinu[..., :half], sinu[..., half:]


def _interleave(a: Tensor, b: Tensor) -> Tensor:
    """(…, D/2), (…, D/2) -> (…, D) with a in the even and b in the odd slots."""
    return torch.stack((a, b), dim=-1).flatten(-2)


def _rotate(x: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return _interleave(x0 * cos - x1 * sin, x1 * cos + x0 * sin)


def _rotate_backward(g: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
    # Transpose of [[cos, -sin], [sin, cos]] applied per pair.
    g0, g1 = g[..., 0::2], g[..., 1::2]
    return _interleave(g0 * cos + g1 * sin, g1 * cos - g0 * sin)


def _prepare(x: Tensor, sinu_pos: Tensor, name: str) -> tuple[Tensor, Tensor, Tensor]:
    val.check_float_tensor(x, name, (2, 3))
    T, D = x.shape[0], x.shape[-1]
    val.check_sinu_pos(sinu_pos, T, D)
    val.check_same_device(**{name: x, "sinu_pos": sinu_pos})
    sinu = sinu_pos.double()
    if x.ndim == 3:
        sinu = sinu[:, None, :]  # broadcast over heads
    sin, cos = _split_sinu(sinu)
    return x.double(), sin, cos


def rotary(x: Tensor, sinu_pos: Tensor) -> Tensor:
    """Rotate x ((T, H, D) or (T, D)) by the (T, D) `[sin | cos]` table; FP64 result."""
    x64, sin, cos = _prepare(x, sinu_pos, "x")
    return _rotate(x64, sin, cos)


def rotary_backward(grad: Tensor, sinu_pos: Tensor) -> Tensor:
    """Gradient w.r.t. the rotary input: the transpose ("conjugate") rotation; FP64 result."""
    g64, sin, cos = _prepare(grad, sinu_pos, "grad")
    return _rotate_backward(g64, sin, cos)
