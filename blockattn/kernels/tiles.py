"""Tile table for the persistent grid: one row per 64-token block of every sequence.

Built from `offsets` on the device with no host sync: the number of rows is an upper bound known
from shapes alone. On a GPU two small Triton kernels build it (a scan of block counts, then one
binary search per slot): a chain of ~20 torch ops cost ~4 % of the shape-P forward, which every
call of the public op pays. On CPU (the interpreter) and as the reference, `torch_tile_table`.
A sequence of length n has ceil(n / bs) blocks and
ceil(n / bs) <= (n + bs - 1) / bs, so the total over B sequences is at most
floor((T + (bs - 1) * B) / bs). Slots past the real blocks get length 0 and are skipped by the
kernels. With `max_seq_len` the bound tightens to B * ceil(max_seq_len / bs).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from blockattn.kernels.tile_math import INTERPRET


class TileTable(NamedTuple):
    start: torch.Tensor  # (n_slots,) int64: first token of the block
    length: torch.Tensor  # (n_slots,) int32: valid tokens in the block, 0 for padding slots
    n_slots: int


def slot_bound(T: int, B: int, block_size: int, max_seq_len: int | None = None) -> int:
    """Upper bound on the number of blocks, from shapes only (see module docstring)."""
    bound = (T + (block_size - 1) * B) // block_size
    if max_seq_len is not None:
        bound = min(bound, B * -(-max_seq_len // block_size))
    return max(bound, 0)


def _empty(dev: torch.device) -> TileTable:
    return TileTable(torch.zeros(0, dtype=torch.int64, device=dev),
                     torch.zeros(0, dtype=torch.int32, device=dev), 0)  # fmt: skip


def build_tile_table(
    offsets: torch.Tensor, T: int, block_size: int, max_seq_len: int | None = None
) -> TileTable:
    """The table the kernels read: Triton-built on a GPU, torch-built elsewhere (same values)."""
    if offsets.is_cuda and not INTERPRET:
        return triton_tile_table(offsets, T, block_size, max_seq_len)
    return torch_tile_table(offsets, T, block_size, max_seq_len)


@triton.jit
def _scan_block_counts(off_ptr, cum_ptr, B, BS: tl.constexpr, CHUNK: tl.constexpr):
    """cum[b] = blocks of sequences 0..b (inclusive), one program, chunk by chunk."""
    # while loops: the interpreter of triton 3.6 cannot run `range` over a runtime bound
    carry = tl.zeros((), dtype=tl.int64)
    c = 0
    while c < B:
        i = c + tl.arange(0, CHUNK)
        m = i < B
        lo = tl.load(off_ptr + i, mask=m, other=0).to(tl.int64)
        hi = tl.load(off_ptr + i + 1, mask=m, other=0).to(tl.int64)
        n = tl.where(m, (hi - lo + BS - 1) // BS, 0)
        tl.store(cum_ptr + i, tl.cumsum(n, 0) + carry, mask=m)
        carry += tl.sum(n, 0)
        c += CHUNK


@triton.jit
def _fill_slots(off_ptr, cum_ptr, start_ptr, len_ptr, B, T, n_slots, n_steps,
                BS: tl.constexpr, SLOTS: tl.constexpr):  # fmt: skip
    """Slot s -> (sequence b = first with cum[b] > s, block j = s - blocks before b)."""
    s = tl.program_id(0).to(tl.int64) * SLOTS + tl.arange(0, SLOTS)
    lo = tl.zeros((SLOTS,), dtype=tl.int64)
    hi = tl.zeros((SLOTS,), dtype=tl.int64) + B
    step = 0
    while step < n_steps:  # binary search: ceil(log2(B + 1)) halvings
        mid = (lo + hi) // 2
        c = tl.load(cum_ptr + mid, mask=mid < B, other=0)
        right = (mid < B) & (c <= s)
        lo = tl.where(right & (lo < hi), mid + 1, lo)
        hi = tl.where(~right & (lo < hi), mid, hi)
        step += 1
    valid = lo < B
    b = tl.minimum(lo, B - 1)
    before = tl.load(cum_ptr + b - 1, mask=b > 0, other=0)
    j = s - before
    first = tl.load(off_ptr + b).to(tl.int64)
    n = tl.load(off_ptr + b + 1).to(tl.int64) - first
    start = first + j * BS
    length = tl.minimum(tl.maximum(n - j * BS, 0), BS)
    length = tl.where(valid, length, 0)
    # Never address past T even if offsets break their contract (as in torch_tile_table).
    start = tl.minimum(tl.maximum(start, 0), T)
    length = tl.minimum(length, T - start)
    m = s < n_slots
    tl.store(start_ptr + s, start, mask=m)
    tl.store(len_ptr + s, length.to(tl.int32), mask=m)


def triton_tile_table(
    offsets: torch.Tensor, T: int, block_size: int, max_seq_len: int | None = None
) -> TileTable:
    """The table in two launches (no host sync); same values as `torch_tile_table`."""
    B = offsets.numel() - 1
    n_slots = slot_bound(T, B, block_size, max_seq_len)
    dev = offsets.device
    if n_slots == 0 or B == 0:
        return _empty(dev)
    cum = torch.empty(B, dtype=torch.int64, device=dev)
    start = torch.empty(n_slots, dtype=torch.int64, device=dev)
    length = torch.empty(n_slots, dtype=torch.int32, device=dev)
    _scan_block_counts[(1,)](offsets, cum, B, BS=block_size, CHUNK=1024)
    grid = (triton.cdiv(n_slots, 256),)
    _fill_slots[grid](offsets, cum, start, length, B, T, n_slots, int(B).bit_length(),
                      BS=block_size, SLOTS=256)  # fmt: skip
    return TileTable(start, length, n_slots)


def torch_tile_table(
    offsets: torch.Tensor, T: int, block_size: int, max_seq_len: int | None = None
) -> TileTable:
    """The table from torch ops (CPU, the interpreter, and the reference of the Triton build)."""
    B = offsets.numel() - 1
    n_slots = slot_bound(T, B, block_size, max_seq_len)
    dev = offsets.device
    if n_slots == 0 or B == 0:
        return _empty(dev)
    off = offsets.to(torch.int64)
    lengths = off[1:] - off[:-1]
    nblk = (lengths + block_size - 1) // block_size
    cum = torch.cumsum(nblk, 0)  # inclusive: blocks of sequences 0..b
    slot = torch.arange(n_slots, device=dev, dtype=torch.int64)
    seq = torch.searchsorted(cum, slot, right=True)  # first b with cum[b] > slot
    valid = seq < B
    seq_c = seq.clamp(max=B - 1)
    j = slot - (cum[seq_c] - nblk[seq_c])  # block index within its sequence
    start = off[seq_c] + j * block_size
    length = (lengths[seq_c] - j * block_size).clamp(0, block_size)
    length = torch.where(valid, length, torch.zeros_like(length))
    # Never address past T even if offsets break their contract (value checks are skipped when
    # the caller asks for no host sync): clamp each block into [0, T).
    start = start.clamp(0, T)
    length = torch.minimum(length, T - start)
    return TileTable(start.contiguous(), length.to(torch.int32).contiguous(), n_slots)
