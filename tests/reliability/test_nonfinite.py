"""Non-finite inputs: the containment contract of `blockattn.block_attention`, tested on the kernel.

Contract (one tile = one (block, head) pair; blocks are cut per sequence, see README):
1. A NaN or +-Inf in q, k, v or grad_out at (token t, head h) may change - and poison - only the
   outputs O, dQ, dK, dV of the tile (block of t, h). Every other tile's outputs are bitwise
   identical to a clean run. Why the tile and not the row: a bad k or v row enters every row of
   S = QK^T or O = PV of its tile, and the backward's Di = rowsum(P * dP) mixes the tile's rows.
   Why not other heads: each (block, head) tile is computed by its own program from its own rows.
2. A non-finite sinu_pos row (shared by all heads) may poison every head of that token's block,
   never another block.
3. Finite inputs always give finite outputs, including zero-length sequences (no tiles), T = 0
   (empty outputs), single-token sequences and partial last blocks: every valid query attends to
   at least itself, so no softmax row the kernel stores is fully masked.
The same tests run the interpreter on CPU and the compiled kernels on a GPU.
"""

from __future__ import annotations

import pytest
import torch

import oracles
from blockattn import block_attention
from blockattn.cases.generate import make_case, offsets_from_lengths

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BS = 64
# Lengths give 5 blocks: [1], [64], [6] (partial), [64], [3]; one zero-length sequence first.
LENGTHS = [0, 1, 70, 64, 3]
H = 2


def _fwd_bwd(case, q, k, v, do, sinu):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = block_attention(q, k, v, case.offsets, sinu_pos=sinu)
    o.backward(do)
    return {"O": o.detach(), "dQ": q.grad, "dK": k.grad, "dV": v.grad}


def _tiles(offsets: torch.Tensor) -> list[tuple[int, int]]:
    start, n = oracles.block_layout(offsets.cpu().to(torch.int64), BS)
    return [(int(s), int(s + c)) for s, c in zip(start, n, strict=True)]


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    # Compare bit patterns: NaN != NaN under torch.equal, and -0.0 == 0.0 would hide a change.
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # numpy, expected
@pytest.mark.parametrize(
    "dtype,D,rotary",
    [(torch.bfloat16, 64, False), (torch.float16, 128, True)],
    ids=["bf16-d64-plain", "fp16-d128-rotary"],
)
def test_nonfinite_stays_in_its_tile(dtype: torch.dtype, D: int, rotary: bool) -> None:
    case = make_case(lengths=LENGTHS, H=H, D=D, dtype=dtype, device=DEVICE, seed=11)
    tiles = _tiles(case.offsets)
    sinu = case.sinu_pos if rotary else None
    clean = _fwd_bwd(case, case.q, case.k, case.v, case.grad_out, sinu)
    for name, t in clean.items():
        assert torch.isfinite(t).all(), f"clean run: {name} is not finite"
    # One injection per tile, in distinct tiles, so each poisoned tile has one known cause.
    # (tensor, block index, head, value, row offset in the block)
    injections = [
        ("q", 0, 0, float("nan"), 0),
        ("k", 1, 1, float("inf"), 37),
        ("v", 2, 0, float("-inf"), 5),
        ("grad_out", 3, 1, float("nan"), 63),
    ]
    bad = {n: getattr(case, n).clone() for n in ("q", "k", "v", "grad_out")}
    poisoned: set[tuple[int, int]] = set()
    gen = torch.Generator().manual_seed(3)
    for name, blk, h, val, row in injections:
        t0, t1 = tiles[blk]
        assert t0 + row < t1
        d = int(torch.randint(0, D, (1,), generator=gen))
        bad[name][t0 + row, h, d] = val
        poisoned.add((blk, h))
    bad_sinu = None
    if rotary:
        bad_sinu = case.sinu_pos.clone()
        t0, _ = tiles[4]
        bad_sinu[t0 + 1, 3] = float("nan")  # a sin entry of block 4: all heads of block 4
        poisoned |= {(4, h) for h in range(H)}
    dirty = _fwd_bwd(case, bad["q"], bad["k"], bad["v"], bad["grad_out"], bad_sinu)
    for blk, (t0, t1) in enumerate(tiles):
        for h in range(H):
            for name in clean:
                a, b = clean[name][t0:t1, h], dirty[name][t0:t1, h]
                if (blk, h) not in poisoned:
                    assert _same_bits(a, b), (
                        f"{name} of clean tile (block {blk}, head {h}, tokens {t0}:{t1}) changed "
                        "after a non-finite value was injected into another tile"
                    )
    # Not vacuous: every injection reached the kernel and changed its own tile.
    for blk, h in sorted(poisoned):
        t0, t1 = tiles[blk]
        changed = [n for n in clean if not _same_bits(clean[n][t0:t1, h], dirty[n][t0:t1, h])]
        assert changed, f"injection into tile (block {blk}, head {h}) changed no output"


@pytest.mark.parametrize("rotary", [False, True], ids=["plain", "rotary"])
def test_zero_length_and_single_token_sequences_are_finite(rotary: bool) -> None:
    lengths = [0, 1, 0, 0, 1, 65, 0]  # empty sequences around single tokens and a 1-token tail
    case = make_case(lengths=lengths, H=H, D=64, dtype=torch.bfloat16, device=DEVICE, seed=5)
    sinu = case.sinu_pos if rotary else None
    got = _fwd_bwd(case, case.q, case.k, case.v, case.grad_out, sinu)
    for name, t in got.items():
        assert t.shape == case.q.shape, name
        assert torch.isfinite(t).all(), f"{name}: non-finite output for finite input"
    # A single-token block attends only to itself: O = v (rotated if rotate_v) exactly.
    t0 = int(case.offsets[1])  # the first 1-token sequence
    want = case.v[t0] if not rotary else oracles.rotary(case.v[t0 : t0 + 1], sinu[t0 : t0 + 1])[0]
    torch.testing.assert_close(got["O"][t0].double(), want.double(), atol=0, rtol=2.0**-7)
    # dQ and dK of a single-token block are exactly 0: softmax over one key has zero gradient.
    assert not got["dQ"][t0].any() and not got["dK"][t0].any()


@pytest.mark.parametrize("n_seqs", [0, 3], ids=["B0", "B3-all-empty"])
def test_empty_batches_give_empty_outputs(n_seqs: int) -> None:
    offsets = offsets_from_lengths(torch.zeros(n_seqs, dtype=torch.int64), torch.int32)
    offsets = offsets.to(DEVICE)
    q, k, v = (torch.zeros(0, H, 64, dtype=torch.bfloat16, device=DEVICE) for _ in range(3))
    q.requires_grad_(True)
    o = block_attention(q, k, v, offsets)
    o.sum().backward()
    assert o.shape == (0, H, 64) and q.grad.shape == (0, H, 64)
    # The FP64 oracle agrees: no NaN from an empty softmax.
    ref = oracles.block_attention(q.detach(), k, v, offsets)
    assert ref.shape == (0, H, 64)


def test_oracle_zero_length_sequences_are_finite() -> None:
    case = make_case(lengths=[0, 1, 0, 64, 0], H=H, D=64, dtype=torch.bfloat16, seed=2)
    outs = oracles.block_attention_backward(case.q, case.k, case.v, case.offsets, case.grad_out)
    o = oracles.block_attention(case.q, case.k, case.v, case.offsets)
    for name, t in zip(("O", "dQ", "dK", "dV"), (o, *outs), strict=True):
        assert torch.isfinite(t).all(), f"oracle {name} is not finite"
