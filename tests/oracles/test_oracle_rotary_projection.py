"""FP64 rotary, rotary-attention and projection oracles.

Relative error = max|a - b| / max|b|; REL_BOUND = 1e-12 (FP64 vs FP64 evaluated in different
orders: O(n * eps) ~ 1e-14, ~100x margin; see oracles/selfcheck.py).
"""

from __future__ import annotations

import pytest
import torch

import oracles
from oracles.selfcheck import REL_BOUND, offsets_of, random_inputs, rel_err

F64 = torch.float64


def _autograd(fn, inputs, grad):
    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    fn(*leaves).backward(grad)
    return [x.grad for x in leaves]


def test_rotary_known_values():
    # One token, D=4: pairs (1, 2) and (3, 4); sin = (0.6, 1), cos = (0.8, 0).
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=F64)
    sinu = torch.tensor([[0.6, 1.0, 0.8, 0.0]], dtype=F64)
    # (x0 cos - x1 sin, x1 cos + x0 sin)
    exp = torch.tensor(
        [[1 * 0.8 - 2 * 0.6, 2 * 0.8 + 1 * 0.6, 3 * 0 - 4 * 1, 4 * 0 + 3 * 1]], dtype=F64
    )
    assert torch.equal(oracles.rotary(x, sinu), exp)
    # Backward = transpose: (g0 cos + g1 sin, g1 cos - g0 sin).
    exp_b = torch.tensor(
        [[1 * 0.8 + 2 * 0.6, 2 * 0.8 - 1 * 0.6, 3 * 0 + 4 * 1, 4 * 0 - 3 * 1]], dtype=F64
    )
    assert torch.equal(oracles.rotary_backward(x, sinu), exp_b)


def test_rotary_preserves_pair_norms_and_inverts():
    _, (x,), sinu = random_inputs((5, 0, 70), 3, 16, seed=30, n=1)  # unit-circle table
    y = oracles.rotary(x, sinu)
    norm = lambda t: t[..., 0::2] ** 2 + t[..., 1::2] ** 2
    assert rel_err(norm(y), norm(x)) <= REL_BOUND
    assert rel_err(oracles.rotary_backward(y, sinu), x) <= REL_BOUND
    assert rel_err(y, x) > 0.1  # it did rotate


def test_rotary_backward_is_adjoint_for_any_table():
    # <R x, g> == <x, R^T g> for an arbitrary (non-rotation) table.
    g0 = torch.Generator().manual_seed(31)
    x, g = (torch.randn(40, 2, 8, generator=g0, dtype=F64) for _ in range(2))
    sinu = 2.0 * torch.randn(40, 8, generator=g0, dtype=F64)
    lhs = (oracles.rotary(x, sinu) * g).sum()
    rhs = (x * oracles.rotary_backward(g, sinu)).sum()
    # Each side sums n = 4 * 640 / 2 * 2 = 1280 products; FP64 summation error is
    # <= n * eps * sum|terms|, and sum|terms| <= max|table| * sum_pairs (|x0|+|x1|)(|g0|+|g1|).
    pair_abs = lambda t: t[..., 0::2].abs() + t[..., 1::2].abs()
    terms = sinu.abs().max() * (pair_abs(x) * pair_abs(g)).sum()
    assert abs(lhs - rhs) <= 1280 * torch.finfo(F64).eps * terms
    ref = _autograd(lambda t: oracles.rotary(t, sinu), [x], g)[0]
    assert rel_err(oracles.rotary_backward(g, sinu), ref) <= REL_BOUND


def test_rotary_accepts_2d_and_3d():
    _, (x,), sinu = random_inputs((9,), 1, 8, seed=32, n=1)
    assert torch.equal(oracles.rotary(x[:, 0], sinu), oracles.rotary(x, sinu)[:, 0])


def test_rotary_attention_is_composition():
    off, (q, k, v), sinu = random_inputs((0, 1, 65, 128), 2, 8, seed=33, n=3)
    for rv in (True, False):
        vv = oracles.rotary(v, sinu) if rv else v
        ref = oracles.block_attention(oracles.rotary(q, sinu), oracles.rotary(k, sinu), vv, off)
        got = oracles.rotary_block_attention(q, k, v, off, sinu, rotate_v=rv)
        assert rel_err(got, ref) <= REL_BOUND


@pytest.mark.parametrize("rotate_v", [True, False], ids=["rotate_v", "no-rotate_v"])
@pytest.mark.parametrize("table", ["unit", "arbitrary"])
def test_rotary_attention_backward_matches_autograd(rotate_v, table):
    off, (q, k, v, g), sinu = random_inputs((0, 1, 63, 64, 65, 129), 2, 8, seed=34)
    if table == "arbitrary":
        sinu = sinu * torch.linspace(0.5, 1.5, sinu.shape[1], dtype=F64)
    fn = lambda a, b, c: oracles.rotary_block_attention(a, b, c, off, sinu, rotate_v=rotate_v)
    ref = _autograd(fn, [q, k, v], g)
    got = oracles.rotary_block_attention_backward(q, k, v, off, sinu, g, rotate_v=rotate_v)
    for a, b in zip(got, ref, strict=True):
        assert rel_err(a, b) <= REL_BOUND


class _RotAttnFn(torch.autograd.Function):
    """Oracle forward + closed-form backward, so gradcheck tests the closed form itself."""

    @staticmethod
    def forward(ctx, q, k, v, off, sinu):
        ctx.save_for_backward(q, k, v, off, sinu)
        return oracles.rotary_block_attention(q, k, v, off, sinu, block_size=4)

    @staticmethod
    def backward(ctx, g):
        q, k, v, off, sinu = ctx.saved_tensors
        d = oracles.rotary_block_attention_backward(q, k, v, off, sinu, g, block_size=4)
        return (*d, None, None)


class _ProjFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, sinu, off, qh, kvh):
        ctx.save_for_backward(x, w, b, sinu, off)
        ctx.heads = (qh, kvh)
        return oracles.projection_rotary_block_attention(x, w, b, sinu, off, qh, kvh, block_size=4)

    @staticmethod
    def backward(ctx, g):
        x, w, b, sinu, off = ctx.saved_tensors
        dx, dw, db = oracles.projection_rotary_block_attention_backward(
            x, w, b, sinu, off, *ctx.heads, g, block_size=4
        )
        return dx, dw, db, None, None, None, None


def test_gradcheck_rotary():
    _, (x,), sinu = random_inputs((3, 4), 2, 4, seed=35, n=1)
    sinu = 1.7 * sinu  # not a rotation
    assert torch.autograd.gradcheck(lambda t: oracles.rotary(t, sinu), [x.requires_grad_()])


@pytest.mark.parametrize("which", ["autograd-of-forward", "closed-form-backward"])
def test_gradcheck_rotary_attention(which):
    off, (q, k, v), sinu = random_inputs((3, 0, 5), 1, 4, seed=36, n=3)
    inputs = [t.requires_grad_(True) for t in (q, k, v)]
    if which == "closed-form-backward":
        fn = lambda a, b, c: _RotAttnFn.apply(a, b, c, off, sinu)
    else:
        fn = lambda a, b, c: oracles.rotary_block_attention(a, b, c, off, sinu, block_size=4)
    assert torch.autograd.gradcheck(fn, inputs)


def _proj_inputs(qh: int, kvh: int, D: int = 4, d_in: int = 5, lengths=(3, 0, 6), seed: int = 37):
    g = torch.Generator().manual_seed(seed)
    T, n = sum(lengths), (qh + 2 * kvh) * D
    x = torch.randn(T, d_in, generator=g, dtype=F64)
    w = torch.randn(d_in, n, generator=g, dtype=F64) / 2
    b = torch.randn(n, generator=g, dtype=F64)
    go = torch.randn(T, qh, D, generator=g, dtype=F64)
    ang = torch.randn(T, D // 2, generator=g, dtype=F64)
    sinu = torch.cat((ang.sin(), ang.cos()), 1)
    return x, w, b, go, sinu, offsets_of(lengths, "cpu")


@pytest.mark.parametrize("heads", [(2, 1), (2, 2)], ids=["gqa-2q-1kv", "mha-2q-2kv"])
@pytest.mark.parametrize("which", ["autograd-of-forward", "closed-form-backward"])
def test_gradcheck_projection(heads, which):
    x, w, b, _, sinu, off = _proj_inputs(*heads)
    inputs = [t.requires_grad_(True) for t in (x, w, b)]
    if which == "closed-form-backward":
        fn = lambda a, c, e: _ProjFn.apply(a, c, e, sinu, off, *heads)
    else:
        fn = lambda a, c, e: oracles.projection_rotary_block_attention(
            a, c, e, sinu, off, *heads, block_size=4
        )
    # fast_mode: checks J along random directions (141 inputs x 2 evals is slow otherwise).
    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)


@pytest.mark.parametrize("heads", [(4, 1), (4, 2), (3, 3)], ids=["gqa4-1", "gqa4-2", "mha3"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("rotate_v", [True, False], ids=["rotate_v", "no-rotate_v"])
def test_projection_backward_matches_autograd(heads, bias, rotate_v):
    x, w, b, go, sinu, off = _proj_inputs(*heads, D=8, d_in=6, lengths=(0, 70, 1, 5))
    b = b if bias else None
    kw = {"rotate_v": rotate_v, "block_size": 32}
    ins = [x, w] + ([b] if bias else [])
    fn = lambda a, c, *e: oracles.projection_rotary_block_attention(
        a, c, e[0] if e else None, sinu, off, *heads, **kw
    )
    ref = _autograd(fn, ins, go)
    dx, dw, db = oracles.projection_rotary_block_attention_backward(
        x, w, b, sinu, off, *heads, go, **kw
    )
    assert rel_err(dx, ref[0]) <= REL_BOUND
    assert rel_err(dw, ref[1]) <= REL_BOUND
    if bias:
        assert rel_err(db, ref[2]) <= REL_BOUND
    else:
        assert db is None


def test_projection_forward_matches_explicit_gqa():
    qh, kvh, D = 4, 2, 8
    x, w, b, _, sinu, off = _proj_inputs(qh, kvh, D=D, d_in=6, lengths=(0, 70, 1, 5))
    T = x.shape[0]
    proj = x @ w + b
    q = proj[:, : qh * D].reshape(T, qh, D)
    kv = proj[:, qh * D :].reshape(T, 2 * kvh, D)
    # Query head h uses kv head h // (qh // kvh): build by explicit index.
    idx = torch.tensor([h // (qh // kvh) for h in range(qh)])
    k, v = kv[:, :kvh][:, idx], kv[:, kvh:][:, idx]
    ref = oracles.rotary_block_attention(q, k, v, off, sinu)
    got = oracles.projection_rotary_block_attention(x, w, b, sinu, off, qh, kvh)
    assert got.shape == (T, qh, D)
    assert rel_err(got, ref) <= REL_BOUND


@pytest.mark.parametrize("kvheads", [2, 1], ids=["mha", "gqa"])
def test_projection_on_an_all_empty_batch(kvheads):
    """T = 0 (every sequence empty): empty outputs and zero gradients, not a reshape error."""
    g = torch.Generator().manual_seed(5)
    H, D, IN = 2, 8, 16
    x = torch.randn(0, IN, generator=g, dtype=torch.float64)
    w = torch.randn(IN, (H + 2 * kvheads) * D, generator=g, dtype=torch.float64)
    bias = torch.randn(w.shape[1], generator=g, dtype=torch.float64)
    sinu = torch.randn(0, D, generator=g, dtype=torch.float64)
    off = torch.tensor([0, 0, 0])
    o = oracles.projection_rotary_block_attention(x, w, bias, sinu, off, H, kvheads)
    assert o.shape == (0, H, D)
    dx, dw, db = oracles.projection_rotary_block_attention_backward(
        x, w, bias, sinu, off, H, kvheads, torch.empty(0, H, D, dtype=torch.float64)
    )
    assert dx.shape == (0, IN) and torch.equal(dw, torch.zeros_like(w))
    assert torch.equal(db, torch.zeros_like(bias))
