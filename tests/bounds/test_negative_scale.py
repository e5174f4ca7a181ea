"""A negative softmax scale is valid (validation accepts it; the battery and the fuzz draw it), and
the bound is a bound on magnitudes: for scale = -c the logits are those of scale = +c with k
negated, so every tensor's bound must be the same elementwise. An H200 false-alarm run (results/
h200_2026-11-27g) found blockattn's O and dV 1.1-1.9x over a bound built with the signed scale."""

from __future__ import annotations

import pytest
import torch

from blockattn.cases.generate import make_case, offsets_from_lengths
from blockattn.judge import tolerances
from oracles import error_bound

LENGTHS = (70, 5, 64)


@pytest.mark.parametrize("rotary", [False, True], ids=["plain", "rotary"])
def test_bound_of_a_negative_scale_is_that_of_the_positive_one_with_k_negated(rotary) -> None:
    tol = tolerances.load(tolerances.latest_released(tolerances.default_tolerance_dir(),
                                                     device="cpu"))  # fmt: skip
    model = tol.model_for("", tol.data["rules"]["blockattn"]["model"]).resolve("float16")
    c = make_case(lengths=list(LENGTHS), H=2, D=64, dtype=torch.float16, device="cpu", seed=9)
    offs = offsets_from_lengths(list(LENGTHS))
    sinu = c.sinu_pos if rotary else None
    got = {}
    for scale, k in ((-0.3, c.k), (0.3, -c.k)):
        (got[scale],) = error_bound.attention_error_bounds(
            c.q, k, c.v, offs, c.grad_out, models=[model], sinu_pos=sinu, scale=scale)
    for name in ("O", "dQ", "dK", "dV"):
        neg, pos = got[-0.3][name], got[0.3][name]
        assert bool((neg >= 0).all()), f"{name}: a negative bound at scale < 0"
        torch.testing.assert_close(neg, pos, rtol=1e-6, atol=0, msg=name)
