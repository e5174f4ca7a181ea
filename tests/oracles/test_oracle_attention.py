"""FP64 block-attention oracle: closed-form backward, second formulation, metamorphic relations.

Relative error is max|a - b| / max|b|. REL_BOUND = 1e-12: both sides are FP64 evaluations of
the same real expression in different orders, differing by O(n * eps) ~ 1e-14 for reductions of
n <= 2 * 64 terms (eps = 2.2e-16); 1e-12 leaves ~100x margin (see oracles/selfcheck.py).
"""

from __future__ import annotations

import math

import pytest
import torch

import oracles
from oracles.selfcheck import REL_BOUND, dense_block_attention, offsets_of, random_inputs, rel_err

LENGTH_SETS = {
    "edges": (0, 1, 63, 64, 65, 0, 127, 128, 129),
    "B1-single-token": (1,),
    "B1-130": (130,),
    "mixed": (17, 0, 200, 5, 64),
}


def _autograd(fn, inputs, grad):
    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    fn(*leaves).backward(grad)
    return [x.grad for x in leaves]


@pytest.mark.parametrize("lengths", LENGTH_SETS.values(), ids=LENGTH_SETS.keys())
@pytest.mark.parametrize("block_size", [64, 16, 7], ids=lambda b: f"bs{b}")
@pytest.mark.parametrize("scale", [None, 0.37], ids=["scale-default", "scale-0.37"])
def test_backward_matches_autograd(lengths, block_size, scale):
    off, (q, k, v, g), _ = random_inputs(lengths, 2, 16, seed=11)
    kw = {"block_size": block_size, "scale": scale}
    ref = _autograd(lambda a, b, c: oracles.block_attention(a, b, c, off, **kw), [q, k, v], g)
    got = oracles.block_attention_backward(q, k, v, off, g, **kw)
    for name, a, b in zip("qkv", got, ref, strict=True):
        assert rel_err(a, b) <= REL_BOUND, f"d{name}"


@pytest.mark.parametrize("lengths", LENGTH_SETS.values(), ids=LENGTH_SETS.keys())
@pytest.mark.parametrize("block_size", [64, 5, 1], ids=lambda b: f"bs{b}")
def test_forward_matches_dense_masked(lengths, block_size):
    off, (q, k, v), _ = random_inputs(lengths, 3, 8, seed=12, n=3)
    got = oracles.block_attention(q, k, v, off, block_size=block_size)
    assert rel_err(got, dense_block_attention(q, k, v, off, block_size)) <= REL_BOUND


def test_backward_matches_dense_masked_autograd():
    off, (q, k, v, g), _ = random_inputs(LENGTH_SETS["edges"], 2, 8, seed=13)
    ref = _autograd(lambda a, b, c: dense_block_attention(a, b, c, off, 64), [q, k, v], g)
    got = oracles.block_attention_backward(q, k, v, off, g)
    for a, b in zip(got, ref, strict=True):
        assert rel_err(a, b) <= REL_BOUND


def test_large_block_is_dense_per_sequence_attention():
    lengths = (0, 1, 63, 129, 7)
    off, (q, k, v), _ = random_inputs(lengths, 2, 8, seed=14, n=3)
    got = oracles.block_attention(q, k, v, off, block_size=max(lengths))
    # Plain unmasked softmax attention per sequence (no block mask at all).
    outs = []
    for s, e in zip(off[:-1].tolist(), off[1:].tolist(), strict=True):
        p = torch.softmax(torch.einsum("thd,shd->hts", q[s:e], k[s:e]) / math.sqrt(8), -1)
        outs.append(torch.einsum("hts,shd->thd", p, v[s:e]))
    assert rel_err(got, torch.cat(outs)) <= REL_BOUND


class _AttnFn(torch.autograd.Function):
    """Oracle forward + closed-form oracle backward, so gradcheck tests the closed form."""

    @staticmethod
    def forward(ctx, q, k, v, off, bs):
        ctx.save_for_backward(q, k, v, off)
        ctx.bs = bs
        return oracles.block_attention(q, k, v, off, block_size=bs)

    @staticmethod
    def backward(ctx, g):
        q, k, v, off = ctx.saved_tensors
        return (*oracles.block_attention_backward(q, k, v, off, g, block_size=ctx.bs), None, None)


@pytest.mark.parametrize("which", ["autograd-of-forward", "closed-form-backward"])
def test_gradcheck_attention(which):
    off, (q, k, v), _ = random_inputs((3, 0, 5), 1, 4, seed=15, n=3)
    inputs = [t.requires_grad_(True) for t in (q, k, v)]
    if which == "autograd-of-forward":
        fn = lambda a, b, c: oracles.block_attention(a, b, c, off, block_size=4)
    else:
        fn = lambda a, b, c: _AttnFn.apply(a, b, c, off, 4)
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)


def test_permutation_within_blocks_permutes_output():
    lengths = (70, 0, 33)
    off, (q, k, v), _ = random_inputs(lengths, 2, 8, seed=16, n=3)
    g = torch.Generator().manual_seed(0)
    # Blocks of 32: [0,32) [32,64) [64,70) | [70,102) [102,103)
    perm = torch.arange(103)
    for s, e in ((0, 32), (32, 64), (64, 70), (70, 102)):
        perm[s:e] = s + torch.randperm(e - s, generator=g)
    assert not torch.equal(perm, torch.arange(103))
    o = oracles.block_attention(q, k, v, off, block_size=32)
    op = oracles.block_attention(q[perm], k[perm], v[perm], off, block_size=32)
    assert rel_err(op, o[perm]) <= REL_BOUND


def test_permutation_across_blocks_changes_output():
    # Control for the test above: the relation is specific to in-block permutations.
    off, (q, k, v), _ = random_inputs((64,), 1, 8, seed=17, n=3)
    perm = torch.arange(64).roll(16)
    o = oracles.block_attention(q, k, v, off, block_size=32)
    op = oracles.block_attention(q[perm], k[perm], v[perm], off, block_size=32)
    assert rel_err(op, o[perm]) > 1e-3


def test_per_row_score_shift_is_invisible():
    # k_j -> k_j + u for all keys adds scale * q_i.u to every score of row i: a per-row constant.
    off, (q, k, v, w), _ = random_inputs((0, 1, 65, 130), 2, 16, seed=18)
    u = 3.0 * w[:1]
    shifted = oracles.block_attention(q, k + u, v, off)
    assert rel_err(shifted, oracles.block_attention(q, k, v, off)) <= REL_BOUND
    # And the shift really moved the scores (else the test proves nothing).
    assert (q * u).sum(-1).abs().max() > 1.0


def test_masked_softmax_row_shift_and_empty_rows():
    g = torch.Generator().manual_seed(19)
    s = torch.randn(5, 7, generator=g, dtype=torch.float64)
    valid = torch.rand(5, 7, generator=g) < 0.6
    valid[0] = False  # a fully masked row
    valid[1, 0] = True
    c = 1e3 * torch.randn(5, 1, generator=g, dtype=torch.float64)
    p = oracles.masked_softmax(s, valid)
    assert rel_err(oracles.masked_softmax(s + c, valid), p) <= REL_BOUND
    assert torch.isfinite(p).all()
    assert torch.equal(p[0], torch.zeros(7, dtype=torch.float64))
    assert (p[~valid] == 0).all()
    sums = p[1:].sum(-1)
    assert (sums - 1).abs().max() <= 8 * torch.finfo(torch.float64).eps  # 7-term sum rounding


def test_changing_one_block_leaves_others_bit_identical():
    lengths = (65, 0, 130, 3)
    off, (q, k, v, r, g), sinu = random_inputs(lengths, 2, 8, seed=20, n=5)
    blk = slice(65 + 64, 65 + 128)  # 2nd block of the 130-long sequence
    q2, k2, v2, g2 = q.clone(), k.clone(), v.clone(), g.clone()
    q2[blk], k2[blk], v2[blk], g2[blk] = r[blk], r[blk] * 2, -r[blk], r[blk].flip(0)
    outside = torch.ones(q.shape[0], dtype=torch.bool)
    outside[blk] = False
    for fwd, a, b in (
        ("fwd", oracles.block_attention(q, k, v, off), oracles.block_attention(q2, k2, v2, off)),
        (
            "rot",
            oracles.rotary_block_attention(q, k, v, off, sinu),
            oracles.rotary_block_attention(q2, k2, v2, off, sinu),
        ),
    ):
        assert torch.equal(a[outside], b[outside]), fwd
        assert not torch.equal(a[blk], b[blk]), fwd
    ga = oracles.block_attention_backward(q, k, v, off, g)
    gb = oracles.block_attention_backward(q2, k2, v2, off, g2)
    for a, b in zip(ga, gb, strict=True):
        assert torch.equal(a[outside], b[outside])
        assert not torch.equal(a[blk], b[blk])


@pytest.mark.parametrize("chunk", [1, 2, 5], ids=lambda c: f"chunk{c}")
def test_chunking_is_invisible(chunk):
    off, (q, k, v, g), sinu = random_inputs((0, 1, 63, 64, 65, 129), 2, 8, seed=21)
    ref = oracles.rotary_block_attention_backward(q, k, v, off, sinu, g)
    got = oracles.rotary_block_attention_backward(q, k, v, off, sinu, g, max_blocks_per_chunk=chunk)
    for a, b in zip(got, ref, strict=True):
        assert rel_err(a, b) <= REL_BOUND
    assert (
        rel_err(
            oracles.block_attention(q, k, v, off, max_blocks_per_chunk=chunk),
            oracles.block_attention(q, k, v, off),
        )
        <= REL_BOUND
    )


def test_zero_scale_averages_values_of_the_block():
    off, (q, k, v), _ = random_inputs((5, 3), 2, 4, seed=22, n=3)
    got = oracles.block_attention(q, k, v, off, block_size=4, scale=0.0)
    # Blocks: [0,4) [4,5) | [5,8): uniform weights.
    exp = torch.cat(
        [v[s:e].mean(0, keepdim=True).expand(e - s, -1, -1) for s, e in ((0, 4), (4, 5), (5, 8))]
    )
    assert rel_err(got, exp) <= REL_BOUND


def test_single_token_output_is_its_value():
    off, (q, k, v, g), _ = random_inputs((1,), 3, 8, seed=23)
    assert torch.equal(oracles.block_attention(q, k, v, off), v)  # softmax over 1 key = 1
    dq, dk, dv = oracles.block_attention_backward(q, k, v, off, g)
    assert torch.equal(dv, g)
    assert torch.equal(dq, torch.zeros_like(dq)) and torch.equal(dk, torch.zeros_like(dk))


@pytest.mark.parametrize("lengths", [(), (0,), (0, 0, 0)], ids=["B0", "B1-empty", "B3-empty"])
def test_empty_inputs(lengths):
    off, (q, k, v, g), sinu = random_inputs(lengths, 2, 8, seed=24)
    assert q.shape == (0, 2, 8)
    o = oracles.block_attention(q, k, v, off)
    assert o.shape == (0, 2, 8) and o.dtype == torch.float64
    for t in oracles.rotary_block_attention_backward(q, k, v, off, sinu, g):
        assert t.shape == (0, 2, 8) and t.dtype == torch.float64


def test_zero_length_sequences_produce_nothing():
    # Inserting empty sequences anywhere must not change any token's output.
    off_a, (q, k, v), _ = random_inputs((0, 40, 0, 0, 70, 0), 2, 8, seed=25, n=3)
    off_b = offsets_of((40, 70), "cpu")
    assert torch.equal(
        oracles.block_attention(q, k, v, off_a), oracles.block_attention(q, k, v, off_b)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_low_precision_inputs_are_upcast(dtype):
    off, (q, k, v, g), _ = random_inputs((70, 3), 2, 8, seed=26)
    lo = [t.to(dtype) for t in (q, k, v, g)]
    up = [t.double() for t in lo]
    o = oracles.block_attention(*lo[:3], off)
    assert o.dtype == torch.float64
    assert torch.equal(o, oracles.block_attention(*up[:3], off))
    for a, b in zip(
        oracles.block_attention_backward(*lo[:3], off, lo[3]),
        oracles.block_attention_backward(*up[:3], off, up[3]),
        strict=True,
    ):
        assert a.dtype == torch.float64 and torch.equal(a, b)


def test_int64_and_int32_offsets_agree():
    off, (q, k, v), _ = random_inputs((70, 0, 3), 2, 8, seed=27, n=3)
    assert torch.equal(
        oracles.block_attention(q, k, v, off), oracles.block_attention(q, k, v, off.long())
    )


def test_huge_scores_stay_finite():
    # Scores with std ~1e4: rows are one-hot or hugely negative; a naive exp overflows.
    off, (q, k, v, g), sinu = random_inputs((1, 63, 64, 65, 200), 2, 16, seed=28)
    q = 1e4 * q
    o = oracles.block_attention(q, k, v, off)
    assert torch.isfinite(o).all()
    for t in oracles.block_attention_backward(q, k, v, off, g):
        assert torch.isfinite(t).all()
    for t in oracles.rotary_block_attention_backward(q, k, v, off, sinu, g):
        assert torch.isfinite(t).all()


def test_block_layout_vectorised():
    off = torch.tensor([0, 0, 5, 5, 17], dtype=torch.int64)
    start, n_valid = oracles.block_layout(off, 4)
    assert start.tolist() == [0, 4, 5, 9, 13]
    assert n_valid.tolist() == [4, 1, 4, 4, 4]


def test_max_blocks_per_chunk_budget():
    # Production: H=4, D=128, bs=64 -> 5.77 MB per block (formula in the docstring).
    per_block = 2 * 8 * (8 * 4 * 64 * 128 + 4 * 4 * 64 * 64)
    assert oracles.max_blocks_per_chunk(4, 128, 64, 1 << 30) == (1 << 30) // per_block
    assert oracles.max_blocks_per_chunk(4, 128, 64, 1) == 1
