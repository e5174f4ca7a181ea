"""FA v2's masking computes -inf * scale: NaN at scale 0 and +inf then NaN below 0, in every row
whose tile holds a masked key (an H100 gate failed on its baseline so, results/h100_2026-11-27i).
The fa2 provider serves a negative scale by negating q (exact), and declares scale 0 unsupported.

On a CPU: FA2's autograd function is replaced by a plain-torch stand-in that behaves as FA2 does
for a scale <= 0 (NaN), so the provider's own code down to that call is what is tested.
"""

from __future__ import annotations

import pytest
import torch

import oracles
from blockattn.cases.generate import make_case
from blockattn.cases.spec import CaseSpec
from blockattn.providers import Supports, Unsupported, fa2


class _FA2LikeMasking:
    """Block attention whose padded keys are masked as FA2 masks them: -inf times the scale."""

    @staticmethod
    def apply(q, k, v, cu, scale, block):
        outs = []
        for a, b in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
            if b == a:
                continue
            s = torch.einsum("ihd,jhd->hij", q[a:b], k[a:b])
            pad = torch.full((*s.shape[:2], block - (b - a)), float("-inf"), dtype=s.dtype)
            s = torch.cat([s, pad], dim=-1) * scale  # the padded keys: -inf * scale
            p = torch.softmax(s, dim=-1)[..., : b - a]
            outs.append(torch.einsum("hij,jhd->ihd", p, v[a:b]))
        return torch.cat(outs)


@pytest.fixture
def fa2_like(monkeypatch):
    monkeypatch.setattr(fa2, "_FA2Fn", _FA2LikeMasking)


def _case():
    return make_case(lengths=[150, 0, 30, 129], H=2, D=64, dtype=torch.float64, seed=7)


def test_the_stand_in_fails_as_fa2_does(fa2_like) -> None:
    # the known answer the tests below rely on: called directly, a scale <= 0 gives NaN
    c = _case()
    cu = fa2.block_cu_seqlens(c.offsets, 64)
    for scale in (-0.125, 0.0):
        assert torch.isnan(_FA2LikeMasking.apply(c.q, c.k, c.v, cu, scale, 64)).any()


def test_negative_scale_is_served_exactly_by_negating_q(fa2_like) -> None:
    c = _case()
    q, k, v = (t.clone().requires_grad_() for t in (c.q, c.k, c.v))
    o = fa2._attention(q, k, v, c.offsets, -0.125, 64)
    ref = oracles.block_attention(c.q, c.k, c.v, c.offsets, block_size=64, scale=-0.125)
    torch.testing.assert_close(o, ref, rtol=1e-12, atol=1e-12)
    do = torch.randn_like(o)
    grads = torch.autograd.grad(o, (q, k, v), do)
    want = oracles.block_attention_backward(c.q, c.k, c.v, c.offsets, do, block_size=64,
                                            scale=-0.125)  # fmt: skip
    for g, w in zip(grads, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)


def test_zero_scale_is_refused_not_computed(fa2_like) -> None:
    c = _case()
    with pytest.raises(Unsupported, match="scale 0"):
        fa2._attention(c.q, c.k, c.v, c.offsets, 0.0, 64)
    case = CaseSpec(lengths=(3,), H=1, D=64, dtype="bfloat16", scale=0.0)
    assert "zero scale" in fa2.SUPPORTS.refusal(case, "cuda", "sm_90")
    assert fa2.SUPPORTS.refusal(CaseSpec(lengths=(3,), H=1, D=64, dtype="bfloat16",
                                         scale=-0.5), "cuda", "sm_90") is None  # fmt: skip


def test_scale_signs_are_declared_and_checked() -> None:
    spec = CaseSpec(lengths=(3,), H=1, D=64)
    only_positive = Supports(scales=("positive",))
    assert only_positive.refusal(spec, "cpu", "cpu") is None  # None: the default 1/sqrt(D)
    assert "negative scale" in only_positive.refusal(
        CaseSpec(lengths=(3,), H=1, D=64, scale=-1.0), "cpu", "cpu")
    assert Supports().refusal(CaseSpec(lengths=(3,), H=1, D=64, scale=0.0), "cpu", "cpu") is None
    with pytest.raises(ValueError, match="scales"):
        Supports(scales=("imaginary",))


def test_baselines_reduce_gemms_in_fp32_and_restore_the_flags() -> None:
    # torch lets cuBLAS round split-K partial sums to 16 bits by default; the baselines' models
    # (class `acc`) assume FP32 reductions, so run_autograd turns that off around the whole
    # forward and backward and restores the caller's setting afterwards
    from blockattn.cases.inputs import build_inputs
    from blockattn.providers import _common

    m = torch.backends.cuda.matmul
    seen = []

    def attention(q, k, v, offsets, scale, block):
        seen.append((m.allow_bf16_reduced_precision_reduction,
                     m.allow_fp16_reduced_precision_reduction))  # fmt: skip
        return q * 1.0

    inp = build_inputs(CaseSpec(lengths=(5, 3), H=1, D=64, dtype="bfloat16"), "cpu")
    before = (m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction)
    m.allow_bf16_reduced_precision_reduction = m.allow_fp16_reduced_precision_reduction = True
    try:
        _common.run_autograd(inp, "plain", attention)
        assert seen == [(False, False)]
        assert m.allow_bf16_reduced_precision_reduction and m.allow_fp16_reduced_precision_reduction
    finally:
        m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction = before
