"""The Gluon tests' FP64 judge (split_bound.split_operand_violations) pinned on CPU, where those
tests cannot run: the oracle's own gradients rounded to the input dtype pass, one element moved
by 1 % of the largest magnitude is one violation, an unwritten (NaN) element is refused; plain
and fused rotary."""

from __future__ import annotations

import pytest
import torch
from split_bound import split_operand_violations

import oracles
from blockattn.cases.generate import make_sinu_pos


def _case(rotary: bool):
    g = torch.Generator().manual_seed(3)
    off = torch.tensor([0, 100, 137])
    q, k, v, do = (torch.randn(137, 2, 64, generator=g).to(torch.bfloat16) for _ in range(4))
    sinu = make_sinu_pos(off, 64) if rotary else None
    if rotary:
        ref = oracles.rotary_block_attention_backward(q, k, v, off, sinu, do, rotate_v=True)
    else:
        ref = oracles.block_attention_backward(q, k, v, off, do, block_size=64)
    return q, k, v, do, off, sinu, [r.to(torch.bfloat16) for r in ref]


@pytest.mark.parametrize("rotary", [False, True], ids=["plain", "rotary"])
def test_split_bound_known_answers(rotary) -> None:
    q, k, v, do, off, sinu, got = _case(rotary)
    zero = dict.fromkeys(("dQ", "dK", "dV"), 0)
    assert split_operand_violations(q, k, v, do, off, tuple(got), sinu) == zero
    moved = got[1].clone()
    moved[5, 1, 7] += 0.01 * float(got[1].abs().max())
    assert split_operand_violations(q, k, v, do, off, (got[0], moved, got[2]), sinu) == dict(
        zero, dK=1)
    unwritten = got[2].clone()
    unwritten[136, 0, 0] = float("nan")
    with pytest.raises(AssertionError, match="dV: unwritten"):
        split_operand_violations(q, k, v, do, off, (got[0], got[1], unwritten), sinu)
