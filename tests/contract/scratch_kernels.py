"""Scratch outside kernels for the contract battery's tests: each is faithful on clean default
inputs (a thin wrapper of blockattn.block_attention) and each breaks one promise. The tests copy
this file into a scratch directory and load the kernels with `--provider scratch_kernels:NAME`."""
import itertools

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
    off = [int(x) for x in offsets.cpu()]
    last = max([a for a, b in itertools.pairwise(off) if b > a], default=0)
    return o + 0 * q[last:].sum()  # the last non-empty sequence's values reach every row


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


_OPTS = dict(dtypes=("bfloat16",), head_dims=(64,), offsets_dtypes=("int32", "int64"),
             max_seq_len=True, nested=True)


def _with_options(q, k, v, offsets, max_seq_len, cut, **kw):
    if q.is_nested:
        return blockattn.block_attention(q, k, v, None, max_seq_len=max_seq_len, **kw)
    o = blockattn.block_attention(q, k, v, offsets, max_seq_len=max_seq_len, **kw)
    if cut and max_seq_len is not None:
        # sizes its grid with max_seq_len // block_size: a last partial block is never computed
        nfull = max_seq_len // kw["block_size"] * kw["block_size"]
        pos = torch.arange(q.shape[0], device=q.device)
        off = offsets.to(torch.int64)
        seq = torch.searchsorted(off[1:], pos, right=True)
        keep = (pos - off[seq]) < nfull
        o = torch.where(keep[:, None, None], o, torch.zeros_like(o))
    return o


@kernel(supports=Supports(**_OPTS))
def with_options(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v, max_seq_len=None):
    """Declares int64 offsets, max_seq_len and nested input, and takes them faithfully."""
    return _with_options(q, k, v, offsets, max_seq_len, False, block_size=block_size,
                         scale=scale, sinu_pos=sinu_pos, rotate_v=rotate_v)


@kernel(supports=Supports(**_OPTS))
def floors_max_seq_len(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v,
                       max_seq_len=None):
    return _with_options(q, k, v, offsets, max_seq_len, True, block_size=block_size,
                         scale=scale, sinu_pos=sinu_pos, rotate_v=rotate_v)


@kernel(supports=Supports(**_OPTS))
def int32_only(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v, max_seq_len=None):
    """Declares int64 offsets but reads them as int32 words (the low half of each)."""
    if offsets is not None and offsets.dtype == torch.int64:
        offsets = offsets.view(torch.int32)[: offsets.numel()]
        offsets = torch.cat((offsets[:-1], offsets.new_tensor([q.shape[0]])))
    return _with_options(q, k, v, offsets, max_seq_len, False, block_size=block_size,
                         scale=scale, sinu_pos=sinu_pos, rotate_v=rotate_v)


@kernel(supports=Supports(dtypes=("bfloat16",), head_dims=(64,)))
def own_stream(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """Launches on a stream of its own without waiting for the caller's (a GPU bug)."""
    if not q.is_cuda:
        return _ba(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        o = _ba(q, k, v, offsets.cpu().to(q.device), block_size, scale, sinu_pos, rotate_v)
    torch.cuda.current_stream().wait_stream(s)
    return o


SEEN: list = []


@kernel(supports=Supports(dtypes=("bfloat16",), head_dims=(64,)))
def recorder(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    """Faithful, and records where its arguments live."""
    SEEN.extend((t.data_ptr(), t.stride(), t.storage_offset()) for t in (q, k, v, offsets))
    return _ba(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)
