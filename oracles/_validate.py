"""Input validation for the FP64 oracles.

Deliberately independent of `blockattn`: the oracles must not share code (including checks)
with the kernels they judge. Every error names the offending argument.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor


def check_float_tensor(x: object, name: str, ndim: int | tuple[int, ...]) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got {x.dtype}")
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if x.ndim not in dims:
        raise ValueError(f"{name} must have rank {' or '.join(map(str, dims))}, got {x.ndim}")
    return x


def check_same_device(**tensors: object) -> torch.device:
    # Non-tensors are skipped here; their own checks raise a TypeError naming them.
    present = {k: t for k, t in tensors.items() if isinstance(t, Tensor)}
    devices = {k: t.device for k, t in present.items()}
    first_name, first = next(iter(devices.items()))
    for name, dev in devices.items():
        if dev != first:
            raise ValueError(
                f"{name} is on {dev} but {first_name} is on {first}: all tensors "
                "(including offsets) must be on the same device"
            )
    return first


def check_offsets(offsets: object, T: int) -> Tensor:
    """Validate `offsets` and return an int64 CPU copy (used for the block layout)."""
    if not isinstance(offsets, Tensor):
        raise TypeError(f"offsets must be a torch.Tensor, got {type(offsets).__name__}")
    if offsets.is_floating_point() or offsets.is_complex() or offsets.dtype == torch.bool:
        raise TypeError(f"offsets must be an integer tensor (int32/int64), got {offsets.dtype}")
    if offsets.ndim != 1:
        raise ValueError(f"offsets must be 1-D of shape (B+1,), got shape {tuple(offsets.shape)}")
    if offsets.numel() < 1:
        raise ValueError("offsets must have at least one element (offsets[0] == 0)")
    if offsets.device.type == "meta":
        raise ValueError("offsets must hold values (not on the meta device)")
    off = offsets.detach().to("cpu", torch.int64)
    if int(off[0]) != 0:
        raise ValueError(f"offsets[0] must be 0, got {int(off[0])}")
    if off.numel() > 1 and bool((off[1:] < off[:-1]).any()):
        bad = int(torch.nonzero(off[1:] < off[:-1])[0, 0])
        raise ValueError(
            f"offsets must be non-decreasing: offsets[{bad + 1}]={int(off[bad + 1])} < "
            f"offsets[{bad}]={int(off[bad])}"
        )
    if int(off[-1]) != T:
        raise ValueError(f"offsets[-1] must equal T={T}, got {int(off[-1])}")
    return off


def check_block_size(block_size: object) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, numbers.Integral):
        raise TypeError(f"block_size must be an int, got {type(block_size).__name__}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    return int(block_size)


def check_scale(scale: object, D: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(D) if D > 0 else 1.0
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {type(scale).__name__}")
    if not math.isfinite(float(scale)):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def check_positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def check_sinu_pos(sinu_pos: object, T: int, D: int) -> Tensor:
    sinu_pos = check_float_tensor(sinu_pos, "sinu_pos", 2)
    if D % 2 != 0:
        raise ValueError(f"head dim D must be even for rotary (sinu_pos), got D={D}")
    if tuple(sinu_pos.shape) != (T, D):
        raise ValueError(f"sinu_pos must have shape (T, D)=({T}, {D}), got {tuple(sinu_pos.shape)}")
    return sinu_pos


def check_qkv(q: object, k: object, v: object) -> tuple[Tensor, Tensor, Tensor]:
    q = check_float_tensor(q, "q", 3)
    k = check_float_tensor(k, "k", 3)
    v = check_float_tensor(v, "v", 3)
    for name, t in (("k", k), ("v", v)):
        if t.shape != q.shape:
            raise ValueError(
                f"{name} must have the same shape as q {tuple(q.shape)}, got {tuple(t.shape)}"
            )
    return q, k, v
