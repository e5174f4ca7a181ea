"""Scratch outside kernels for the contract battery's tests: each is faithful on clean default
inputs (a thin wrapper of blockattn.block_attention) and each breaks one promise. The tests copy
this file into a scratch directory and load the kernels with `--provider scratch_kernels:NAME`."""
import torch

import blockattn
from blockattn.providers import Supports, kernel

_calls = [0]


def _ba(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v):
    return blockattn.block_attention(q, k, v, offsets, block_size=block_size, scale=scale,
                                     sinu_pos=sinu_pos, rotate_v=rotate_v)


@kernel(supports=Supports(dtypes=("bfloat16",), head_dims=(64,)))
def faithful(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    return _ba(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)


@kernel(supports=Supports(dtypes=("bfloat16",), head_dims=(64,)))
def leaky(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    o = _ba(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)
    last = int(offsets[-2]) if offsets.numel() > 1 else 0
    return o + 0 * q[last:].sum()  # the last sequence's values reach every row


@kernel(supports=Supports(dtypes=("bfloat16",), head_dims=(64,)))
def fixed_block(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    return _ba(q, k, v, offsets, 64, scale, sinu_pos, rotate_v)  # ignores block_size


def _as_contiguous(t):
    _, H, D = t.shape
    return t.as_strided(t.shape, (H * D, D, 1), t.storage_offset())


@kernel(supports=Supports(dtypes=("bfloat16",), head_dims=(64,)))
def assumes_contiguous(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    q, k, v = (_as_contiguous(t) for t in (q, k, v))
    return _ba(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)


@kernel(supports=Supports(dtypes=("bfloat16",), head_dims=(64,), deterministic=True))
def flaky(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    o = _ba(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)
    _calls[0] += 1
    if _calls[0] % 2 == 0 and o.numel():
        o = o.clone()
        with torch.no_grad():
            o.view(torch.int16).view(-1)[0] ^= 1  # one bit of one element
    return o


@kernel(supports=Supports(dtypes=("bfloat16",), head_dims=(64,)))
def scribbler(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    o = _ba(q.clone(), k, v, offsets, block_size, scale, sinu_pos, rotate_v)
    with torch.no_grad():
        q.mul_(0.5)  # the caller's q, after computing on a copy
    return o


@kernel(supports=Supports(dtypes=("bfloat16",), head_dims=(64,)))
def flaky_undeclared(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """flaky without declaring determinism: measured, never failed."""
    return flaky(q, k, v, offsets, block_size=block_size, scale=scale, sinu_pos=sinu_pos,
                 rotate_v=rotate_v)


@kernel(supports=Supports(dtypes=("bfloat16",), head_dims=(64,)))
def aliasing(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    o = _ba(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)
    with torch.no_grad():
        out = v.detach()
        out.copy_(o)  # the output lives in the caller's v
    return out.requires_grad_(True)


@kernel(supports=Supports(dtypes=("bfloat16",), head_dims=(64,)))
def empty_crash(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    if q.shape[0] == 0:
        raise RuntimeError("no tokens")
    return _ba(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)


@kernel(supports=Supports(dtypes=("bfloat16",), head_dims=(64,), block_sizes=(64,),
                          layouts=("padded", "storage-offset", "grad-out-transposed")))
def declares_refusals(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """Refuses what it declares it does not take: recorded unsupported, never failed."""
    if block_size != 64 or any(t.stride(0) != t.shape[1] * t.shape[2] for t in (q, k, v)):
        raise ValueError("only block_size 64 and head-packed q, k, v")
    return _ba(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)
