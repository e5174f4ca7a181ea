"""Known-answer witness kernels for the contract battery: small plain-torch kernels (no Triton:
milliseconds on a CPU), `faithful` exact in FP32 and each other one breaking exactly one
property, for one tensor or one position. `tests/contract/test_witnesses.py` runs each through
the part of the battery that must catch it and asserts the FAIL names that property (and that
`faithful` passes the same part): the battery's judge is pinned the way the numeric judge's
known answers pin it, and the judge mutants of the catalog die in those tests.

Loaded as `--provider witness_kernels:NAME` (the tests put this directory on sys.path).
"""

from __future__ import annotations

import itertools

import torch

from blockattn.providers import Supports, kernel
from blockattn.providers._common import rotary

SUP = Supports(dtypes=("bfloat16",), head_dims=(64,), deterministic=True)
_calls = [0]


def _slots(offsets: torch.Tensor, T: int, block_size: int):
    """Each token's (block, slot) in a padded (n_blocks, block_size) layout."""
    off = offsets.to(torch.int64).cpu()
    pos = torch.arange(T)
    seq = torch.searchsorted(off[1:], pos, right=True)
    inseq = pos - off[seq]
    lens = off[1:] - off[:-1]
    nblk = (lens + block_size - 1) // block_size
    first = torch.cumsum(nblk, 0) - nblk
    blk = first[seq] + inseq // block_size
    return blk, inseq % block_size, int(nblk.sum())


def attend(q, k, v, offsets, block_size, scale):
    """FP32 block-diagonal attention of (T, H, D) q, k, v: each block gathered into a padded
    tile (other blocks' rows never enter its arithmetic, forward or backward)."""
    T, H, D = q.shape
    if T == 0:
        return q * 0
    blk, slot, n = _slots(offsets, T, block_size)
    blk, slot = blk.to(q.device), slot.to(q.device)
    flat = blk * block_size + slot  # each token's row of the padded layout
    owner = torch.full((n * block_size,), -1, dtype=torch.int64, device=q.device)
    owner[flat] = torch.arange(T, device=q.device)
    valid = owner >= 0

    def tile(x):
        g = x.float()[owner.clamp(min=0)]
        g = torch.where(valid[:, None, None], g, torch.zeros_like(g))
        return g.reshape(n, block_size, H, D)

    qt, kt, vt = tile(q), tile(k), tile(v)
    s = torch.einsum("nihd,njhd->nhij", qt, kt) * scale
    kmask = valid.reshape(n, 1, 1, block_size)
    s = s.masked_fill(~kmask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    o = torch.einsum("nhij,njhd->nihd", p, vt).reshape(n * block_size, H, D)
    return o[flat]


def _faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v):
    dtype = q.dtype
    q, k, v = q.float(), k.float(), v.float()
    if sinu_pos is not None:
        q, k = rotary(q, sinu_pos.float()), rotary(k, sinu_pos.float())
        if rotate_v:
            v = rotary(v, sinu_pos.float())
    return attend(q, k, v, offsets, block_size, scale).to(dtype)


def _w(fn):
    return kernel(supports=SUP)(fn)


@_w
def faithful(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    return _faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)


# ----------------------------------------------------------------------------- containment


def _seq_bounds(offsets):
    off = [int(x) for x in offsets.cpu()]
    return [(a, b) for a, b in itertools.pairwise(off) if b > a]


@_w
def leak_after(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """Sequence 0's q reaches every row after it (only later rows; only from sequence 0)."""
    o = _faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)
    a, b = _seq_bounds(offsets)[0]
    return torch.cat((o[:b], o[b:] + 0 * q[a:b].detach().sum()))


@_w
def leak_before(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """The last sequence's k reaches every row before it (only earlier rows)."""
    o = _faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)
    a, b = _seq_bounds(offsets)[-1]
    return torch.cat((o[:a] + 0 * k[a:b].detach().sum(), o[a:]))


@_w
def leak_across_blocks(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """Within one sequence and head, v of every block reaches the sequence's other blocks
    (never another sequence, never another head)."""
    o = _faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)
    parts, last = [], 0
    for a, b in _seq_bounds(offsets):
        parts += [o[last:a], o[a:b] + 0 * v[a:b].detach().sum(dim=(0, 2))[None, :, None]]
        last = b
    return torch.cat((*parts, o[last:]))


@_w
def leak_across_heads(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """Each token's q of every head reaches that token's other heads (nothing else)."""
    o = _faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)
    return o + 0 * q.detach().sum(dim=(1, 2))[:, None, None]


class _GradOutLeak(torch.autograd.Function):
    @staticmethod
    def forward(ctx, o):
        return o.clone()

    @staticmethod
    def backward(ctx, g):
        return g + 0 * g.sum()  # grad_out's every value reaches every gradient


@_w
def leak_from_grad_out(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """Forward faithful; the backward spreads grad_out over every row (dQ, dK, dV)."""
    return _GradOutLeak.apply(_faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v))


@_w
def leak_from_sinu(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """sinu_pos of every row reaches every output row (rotary only)."""
    o = _faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)
    return o if sinu_pos is None else o + 0 * sinu_pos.sum().to(o.dtype)


# ----------------------------------------------------------------------------- layout


def _contig(t):
    """t's memory read as if it were contiguous from its first element."""
    return t.as_strided(t.shape, torch.empty(t.shape).stride(), t.storage_offset())


class _ReadGradOutContiguous(torch.autograd.Function):
    @staticmethod
    def forward(ctx, o):
        return o.clone()

    @staticmethod
    def backward(ctx, g):
        return _contig(g)


@_w
def grad_out_as_contiguous(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """The backward reads grad_out as if it were contiguous (q, k, v read right)."""
    o = _faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)
    return _ReadGradOutContiguous.apply(o)


@_w
def k_as_contiguous(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """Reads k as if it were contiguous (q, v, grad_out read right)."""
    return _faithful(q, _contig(k), v, offsets, block_size, scale, sinu_pos, rotate_v)


@_w
def heads_packed(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """Takes q's head stride to be D (heads packed): right at H = 1, wrong for a head-strided
    or (H, T, D)-stored q."""
    D = q.shape[2]
    q = q.as_strided(q.shape, (q.stride(0), D, q.stride(2)), q.storage_offset())
    return _faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)


@_w
def q_strides_for_all(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """Reads k and v with q's strides: right whenever the three share a layout."""
    k, v = (t.as_strided(t.shape, q.stride(), t.storage_offset()) for t in (k, v))
    return _faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)


@_w
def sinu_as_contiguous(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """Reads sinu_pos's rows as if they were D apart."""
    if sinu_pos is not None:
        sinu_pos = _contig(sinu_pos)
    return _faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)


# ----------------------------------------------------------------------------- scale


@_w
def zero_scale_is_default(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """`scale or D**-0.5`: a scale of 0 taken as "unset"."""
    scale = scale or q.shape[2] ** -0.5
    return _faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)


@_w
def plain_ignores_scale(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """The plain path uses the default scale whatever it is given (rotary honours it)."""
    if sinu_pos is None:
        scale = q.shape[2] ** -0.5
    return _faithful(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)


@_w
def abs_scale(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """A negative scale taken as its magnitude."""
    return _faithful(q, k, v, offsets, block_size, abs(scale), sinu_pos, rotate_v)


# ----------------------------------------------------------------------------- determinism, inputs


class _FlipDV(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v):
        return v.clone()

    @staticmethod
    def backward(ctx, g):
        _calls[0] += 1
        if _calls[0] % 2 == 0 and g.numel():
            g = g.clone()
            g.view(torch.int16 if g.element_size() == 2 else torch.int32).view(-1)[0] ^= 1
        return g


@_w
def dv_nondeterministic(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """O, dQ, dK repeatable; one bit of dV flips on every other call."""
    return _faithful(q, k, _FlipDV.apply(v), offsets, block_size, scale, sinu_pos, rotate_v)


class _WriteGradOut(torch.autograd.Function):
    @staticmethod
    def forward(ctx, o):
        return o.clone()

    @staticmethod
    def backward(ctx, g):
        out = g.clone()
        if g.numel():
            g.view(-1)[:1] += 1  # the caller's grad_out (autograd hands the caller's tensor)
        return out


@_w
def writes_grad_out(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """The backward scribbles on its grad_out."""
    return _WriteGradOut.apply(_faithful(q, k, v, offsets, block_size, scale, sinu_pos,
                                         rotate_v))  # fmt: skip
