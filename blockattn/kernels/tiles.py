"""Tile table for the persistent grid: one row per 64-token block of every sequence.

Built from `offsets` with torch ops only, so it needs no host sync: the number of rows is an upper
bound known from shapes alone. A sequence of length n has ceil(n / bs) blocks and
ceil(n / bs) <= (n + bs - 1) / bs, so the total over B sequences is at most
floor((T + (bs - 1) * B) / bs). Slots past the real blocks get length 0 and are skipped by the
kernels. With `max_seq_len` the bound tightens to B * ceil(max_seq_len / bs).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


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


def build_tile_table(
    offsets: torch.Tensor, T: int, block_size: int, max_seq_len: int | None = None
) -> TileTable:
    B = offsets.numel() - 1
    n_slots = slot_bound(T, B, block_size, max_seq_len)
    dev = offsets.device
    if n_slots == 0 or B == 0:
        return TileTable(
            torch.zeros(0, dtype=torch.int64, device=dev),
            torch.zeros(0, dtype=torch.int32, device=dev),
            0,
        )
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
