"""The tile table's two builders agree: the Triton one (the interpreter on CPU, the real thing on
a GPU, where the public op uses it) and the torch one, on valid offsets (empty sequences, exact
and partial blocks, every block size class, with and without max_seq_len) and on offsets that
break their contract (every block still lies inside [0, T))."""

from __future__ import annotations

import pytest
import torch

from blockattn.kernels.tiles import torch_tile_table, triton_tile_table

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _offsets(gen: torch.Generator, B: int, max_len: int, dtype: torch.dtype) -> torch.Tensor:
    lengths = torch.randint(0, max_len + 1, (B,), generator=gen)
    lengths[torch.rand(B, generator=gen) < 0.3] = 0  # empty sequences, the production sparsity
    return torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).to(dtype)


def _same(off: torch.Tensor, T: int, bs: int, msl: int | None) -> None:
    want = torch_tile_table(off, T, bs, msl)
    got = triton_tile_table(off.to(DEVICE), T, bs, msl)
    assert got.n_slots == want.n_slots
    assert torch.equal(got.start.cpu(), want.start), (bs, msl)
    assert torch.equal(got.length.cpu(), want.length), (bs, msl)


@pytest.mark.parametrize(
    ("dtype", "bs"), [(torch.int32, 64), (torch.int64, 16), (torch.int64, 100)]
)
def test_triton_and_torch_tables_agree(dtype, bs) -> None:
    gen = torch.Generator().manual_seed(7 + bs)
    for B, max_len in ((1, 1), (3, 64), (37, 300), (1100, 40)):  # 1100: two scan chunks
        off = _offsets(gen, B, max_len, dtype)
        T = int(off[-1])
        _same(off, T, bs, None)
        _same(off, T, bs, int((off[1:] - off[:-1]).max()))


def test_broken_offsets_stay_inside_the_tokens() -> None:
    off = torch.tensor([0, 70, 40, 200, 150], dtype=torch.int64)  # decreasing, past T = 150
    got = triton_tile_table(off.to(DEVICE), 150, 64)
    start, length = got.start.cpu(), got.length.cpu().to(torch.int64)
    assert bool((start >= 0).all()) and bool((length >= 0).all())
    assert bool((start + length <= 150).all())


def test_empty_sequences_give_empty_slots() -> None:
    _same(torch.zeros(4, dtype=torch.int64), 0, 64, None)
    got = triton_tile_table(torch.zeros(4, dtype=torch.int64, device=DEVICE), 0, 64)
    assert not bool(got.length.any())
