"""The FA2 and FA4 baselines cut cu_seqlens at the case's block size, never at 64 whatever it
is (issue 42, item 5): a cut every 64 tokens computes another operator at block sizes 1, 24
and 128, and no GPU case of the corpus at block size 64 shows it.

On a CPU: each provider's attention is called through its own code down to the varlen call,
which is replaced by a plain-torch varlen attention (each cu_seqlens segment one sequence, no
segment longer than max_seqlen: FA's contract). The result must match the FP64 oracle at the
case's block size, through the contract-battery callable (`KERNEL`) and through `run`'s path.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

import oracles
from blockattn.cases.generate import make_case
from blockattn.providers import fa2, fa4

_W = Path(__file__).resolve().parents[1] / "contract" / "witness_kernels.py"
_spec = importlib.util.spec_from_file_location("_witness_kernels_for_cut", _W)
_wk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_wk)
attend = _wk.attend  # plain-torch block attention

SEEN: list[tuple[list[int], int]] = []


def _varlen(q, k, v, cu, max_q, max_k, scale):
    segs = [int(b) - int(a) for a, b in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)]
    SEEN.append((segs, int(max_q)))
    assert max_q == max_k and all(0 < n <= max_q for n in segs), (segs, max_q)
    big = max(segs)  # one block per segment: attention within each segment only
    return attend(q, k, v, cu, big, scale).to(q.dtype)


class _FakeFA2:
    @staticmethod
    def apply(q, k, v, cu, scale, block):
        return _varlen(q, k, v, cu, block, block, scale)


def _fake_fa4(q, k, v, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
              softmax_scale, causal):  # fmt: skip
    assert torch.equal(cu_seqlens_q, cu_seqlens_k) and not causal
    return _varlen(q, k, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k, softmax_scale)


@pytest.fixture
def fakes(monkeypatch):
    monkeypatch.setattr(fa2, "_FA2Fn", _FakeFA2)
    monkeypatch.setattr(fa4, "_varlen_func", lambda: _fake_fa4)
    monkeypatch.setattr(fa4, "_require_cuda", lambda q: None)
    SEEN.clear()


@pytest.mark.parametrize("bs", [1, 24, 64, 128])
@pytest.mark.parametrize("mod", [fa2, fa4], ids=["fa2", "fa4"])
def test_cu_seqlens_are_cut_at_the_cases_block_size(fakes, mod, bs) -> None:
    lengths = [150, 0, 30, 129]
    c = make_case(lengths=lengths, H=2, D=64, dtype=torch.float32, seed=bs)
    scale = 64**-0.5
    o = mod._attention(c.q, c.k, c.v, c.offsets, scale, bs)
    ref = oracles.block_attention(c.q, c.k, c.v, c.offsets, block_size=bs, scale=scale)
    torch.testing.assert_close(o.double(), ref, rtol=1e-4, atol=1e-5)
    segs, max_q = SEEN[-1]
    assert max_q == bs and max(segs) == min(bs, max(lengths)), (segs, max_q)
    if mod is fa4:  # the contract battery's callable forwards its block_size (fa2's refuses
        SEEN.clear()  # a CPU before it gets there)
        mod.KERNEL(c.q, c.k, c.v, c.offsets, block_size=bs, scale=scale, sinu_pos=None,
                   rotate_v=True)  # fmt: skip
        assert SEEN and SEEN[-1][1] == bs


def test_a_cut_every_64_tokens_is_another_operator() -> None:
    # the known answer the test above relies on: at block size 24 a 64-token cut differs
    c = make_case(lengths=[150, 0, 30], H=2, D=64, dtype=torch.float32, seed=1)
    a = oracles.block_attention(c.q, c.k, c.v, c.offsets, block_size=24, scale=0.125)
    b = oracles.block_attention(c.q, c.k, c.v, c.offsets, block_size=64, scale=0.125)
    assert (a - b).abs().max() > 1e-2
