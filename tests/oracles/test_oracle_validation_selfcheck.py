"""Oracle input validation (errors name the argument) and the self-check report/command."""

from __future__ import annotations

import argparse
import math

import pytest
import torch

import oracles
import oracles.selfcheck as sc
from oracles.selfcheck import offsets_of, random_inputs

F64 = torch.float64


@pytest.fixture
def inp():
    off, (q, k, v, g), sinu = random_inputs((3, 0, 70), 2, 8, seed=40)
    return q, k, v, g, off, sinu


def _attn(q, k, v, off, **kw):
    return oracles.block_attention(q, k, v, off, **kw)


OFFSET_CASES = {
    "non-monotonic": (lambda off: torch.tensor([0, 50, 3, 73]), ValueError, "non-decreasing"),
    "first-not-zero": (lambda off: torch.tensor([1, 3, 3, 73]), ValueError, r"offsets\[0\]"),
    "last-not-T": (lambda off: torch.tensor([0, 3, 3, 72]), ValueError, r"offsets\[-1\].*T=73"),
    "float": (lambda off: off.float(), TypeError, "offsets.*integer"),
    "bool": (lambda off: torch.ones(4, dtype=torch.bool), TypeError, "offsets.*integer"),
    "2-D": (lambda off: off[None], ValueError, "offsets.*1-D"),
    "empty": (lambda off: off[:0], ValueError, "offsets"),
    "list": (lambda off: off.tolist(), TypeError, "offsets.*Tensor"),
}


@pytest.mark.parametrize("make,exc,match", OFFSET_CASES.values(), ids=OFFSET_CASES.keys())
def test_bad_offsets(inp, make, exc, match):
    q, k, v, g, off, _ = inp
    with pytest.raises(exc, match=match):
        _attn(q, k, v, make(off))
    with pytest.raises(exc, match=match):
        oracles.block_attention_backward(q, k, v, make(off), g)


def test_bad_shapes_and_ranks(inp):
    q, k, v, g, off, _sinu = inp
    with pytest.raises(ValueError, match="k must have the same shape as q"):
        _attn(q, k[:, :1], v, off)
    with pytest.raises(ValueError, match="v must have the same shape as q"):
        _attn(q, k, v[..., :4], off)
    with pytest.raises(ValueError, match="q must have rank 3"):
        _attn(q[0], k, v, off)
    with pytest.raises(ValueError, match="k must have rank 3"):
        _attn(q, k[None], v, off)
    with pytest.raises(ValueError, match="grad_out must have the shape of q"):
        oracles.block_attention_backward(q, k, v, off, g[:, :1])
    with pytest.raises(TypeError, match="q must have a floating dtype"):
        _attn(q.long(), k, v, off)
    with pytest.raises(TypeError, match=r"v must be a torch\.Tensor"):
        _attn(q, k, None, off)


def test_devices_must_match(inp):
    q, k, v, _g, off, sinu = inp
    with pytest.raises(ValueError, match="k is on meta"):
        _attn(q, k.to("meta"), v, off)
    with pytest.raises(ValueError, match="offsets is on meta"):
        _attn(q, k, v, off.to("meta"))
    with pytest.raises(ValueError, match="sinu_pos is on meta"):
        oracles.rotary_block_attention(q, k, v, off, sinu.to("meta"))
    with pytest.raises(ValueError, match="sinu_pos is on meta"):
        oracles.rotary(q, sinu.to("meta"))


@pytest.mark.parametrize("scale", [math.inf, -math.inf, math.nan], ids=["inf", "-inf", "nan"])
def test_non_finite_scale(inp, scale):
    q, k, v, g, off, _ = inp
    with pytest.raises(ValueError, match="scale must be finite"):
        _attn(q, k, v, off, scale=scale)
    with pytest.raises(ValueError, match="scale must be finite"):
        oracles.block_attention_backward(q, k, v, off, g, scale=scale)


def test_bad_scale_type_block_size_and_chunk(inp):
    q, k, v, _g, off, _ = inp
    with pytest.raises(TypeError, match="scale"):
        _attn(q, k, v, off, scale="1")
    for bad in (0, -3):
        with pytest.raises(ValueError, match="block_size must be >= 1"):
            _attn(q, k, v, off, block_size=bad)
    with pytest.raises(TypeError, match="block_size must be an int"):
        _attn(q, k, v, off, block_size=2.0)
    with pytest.raises(ValueError, match="max_blocks_per_chunk"):
        _attn(q, k, v, off, max_blocks_per_chunk=0)


def test_bad_sinu_pos_and_odd_D(inp):
    q, k, v, g, off, sinu = inp
    with pytest.raises(ValueError, match=r"sinu_pos must have shape \(T, D\)=\(73, 8\)"):
        oracles.rotary_block_attention(q, k, v, off, sinu[:-1])
    with pytest.raises(ValueError, match="sinu_pos must have shape"):
        oracles.rotary_block_attention_backward(q, k, v, off, sinu[:, :6], g)
    with pytest.raises(ValueError, match="sinu_pos must have rank 2"):
        oracles.rotary(q, sinu[None])
    with pytest.raises(ValueError, match="D must be even"):
        oracles.rotary(q[..., :7], sinu[:, :7])
    with pytest.raises(ValueError, match="D must be even"):
        oracles.rotary_block_attention(q[..., :7], k[..., :7], v[..., :7], off, sinu[:, :7])
    with pytest.raises(ValueError, match="grad must have rank"):
        oracles.rotary_backward(q[0, 0], sinu)


def test_bad_projection_arguments():
    g = torch.Generator().manual_seed(41)
    x = torch.randn(9, 5, generator=g, dtype=F64)
    w = torch.randn(5, 4 * 4, generator=g, dtype=F64)  # (2 + 2*1) heads x D=4
    b = torch.randn(16, generator=g, dtype=F64)
    off = offsets_of((3, 6), "cpu")
    sinu = torch.randn(9, 4, generator=g, dtype=F64)
    f = oracles.projection_rotary_block_attention
    assert f(x, w, b, sinu, off, 2, 1).shape == (9, 2, 4)
    with pytest.raises(ValueError, match="qheads=3 must be a multiple of kvheads=2"):
        f(x, torch.randn(5, 7 * 4, dtype=F64), None, sinu, off, 3, 2)
    with pytest.raises(ValueError, match=r"w must have shape \(d_in=5"):
        f(x, w[:4], b, sinu, off, 2, 1)
    with pytest.raises(ValueError, match=r"w.shape\[1\]=15"):
        f(x, w[:, :15], None, sinu[:, :3], off, 2, 1)
    with pytest.raises(ValueError, match="bias must have shape"):
        f(x, w, b[:8], sinu, off, 2, 1)
    with pytest.raises(ValueError, match="kvheads must be >= 1"):
        f(x, w, b, sinu, off, 2, 0)
    with pytest.raises(ValueError, match="x must have rank 2"):
        f(x[None], w, b, sinu, off, 2, 1)
    with pytest.raises(ValueError, match="offsets"):
        f(x, w, b, sinu, offsets_of((3, 5), "cpu"), 2, 1)
    with pytest.raises(ValueError, match="sinu_pos must have shape"):
        oracles.projection_rotary_block_attention_backward(
            x, w, b, sinu[:-1], off, 2, 1, torch.zeros(9, 2, 4)
        )


def test_selfchecks_all_pass_with_structured_results():
    results = sc.run_selfchecks("cpu")
    assert len(results) == len(sc.CHECKS) >= 10
    for r in results:
        assert {"name", "value", "bound", "passed", "detail"} <= set(r)
        assert r["passed"], r
    report = sc.format_markdown(results)
    assert report.count("| PASS |") == len(results) and "FAIL" not in report


def test_selfcheck_detects_a_broken_backward(monkeypatch):
    # The check must be able to fail: corrupt dq by a relative 1e-9 (far below any kernel
    # tolerance, far above the 1e-12 bound).
    real = sc.block_attention_backward

    def broken(*a, **kw):
        dq, dk, dv = real(*a, **kw)
        return dq * (1 + 1e-9), dk, dv

    monkeypatch.setattr(sc, "block_attention_backward", broken)
    r = sc.check_backward_vs_autograd("cpu")
    assert not r["passed"] and r["value"] > 1e-10


def test_selfcheck_reports_a_crashing_check(monkeypatch):
    def boom(device):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(sc, "CHECKS", (boom,))
    (r,) = sc.run_selfchecks("cpu")
    assert not r["passed"] and "kaboom" in r["detail"]


def test_selfcheck_command(capsys, monkeypatch):
    from blockattn.commands import selfcheck as cmd

    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    assert cmd.main(parser.parse_args([])) == 0
    out = capsys.readouterr().out
    assert "| check | measured | bound | result | detail |" in out and "FAIL" not in out
    monkeypatch.setattr(sc, "CHECKS", (lambda d: sc._result("fake", 1.0, 0.0, "x"),))
    assert cmd.main(parser.parse_args(["--json"])) == 1
    assert '"passed": false' in capsys.readouterr().out


def test_selfcheck_reaches_extreme_score_ranges_and_catches_a_max_over_padding(monkeypatch):
    # The construction reaches the ranges it names (every score of the aimed rows below FP64's
    # exp underflow), and a softmax whose max is taken over the padding keys too (score 0 in a
    # partial block's padded tile) fails it, though the older checks pass such an oracle.
    import oracles.attention as A

    r = sc.check_extreme_ranges("cpu")
    assert r["passed"] and "below exp underflow" in r["detail"], r

    def max_over_padding(scores, valid):
        s = scores.masked_fill(~valid, float("-inf"))
        e = torch.exp(s - scores.amax(dim=-1, keepdim=True))
        d = e.sum(-1, keepdim=True)
        return e / torch.where(d > 0, d, torch.ones_like(d))

    monkeypatch.setattr(A, "masked_softmax", max_over_padding)
    bad = sc.check_extreme_ranges("cpu")
    assert not bad["passed"] and "below exp underflow" in bad["detail"], bad
