"""Known answers where the exact value is 0 or subnormal (issue 21, item 17): garbage exactly
there is counted, element by element, never skipped as "structural"."""

from __future__ import annotations

import pytest
import torch

from blockattn.bounds.elementwise import elementwise_metrics


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_garbage_where_the_exact_value_is_zero_is_a_violation(dtype: str) -> None:
    g = torch.Generator().manual_seed(5)
    r = torch.randn(64, 8, generator=g, dtype=torch.float64)
    r[::4, :] = 0.0  # structural zeros (e.g. gradients of one-token blocks): 16 x 8 elements
    y = r.to(getattr(torch, dtype))  # correctly rounded everywhere
    E = torch.full_like(r, 2.0**-20)  # a tight allowance
    clean = elementwise_metrics(y, r, dtype, bound=E)
    assert clean["bound"]["violations"] == 0
    bad = y.clone()
    bad[::4, :] = 0.25  # garbage exactly where r == 0, nowhere else
    m = elementwise_metrics(bad, r, dtype, bound=E)
    assert m["bound"]["violations"] == 16 * 8
    assert m["ulp"]["pct_correctly_rounded"] == pytest.approx(100.0 * (1 - 16 / 64))


@pytest.mark.parametrize(("dtype", "tiny"), [("bfloat16", 2.0**-130), ("float16", 2.0**-20)])
def test_subnormal_outputs_are_judged_at_their_own_spacing(dtype: str, tiny: float) -> None:
    # exact values in the subnormal range: a stored value off by several spacings violates a
    # zero allowance; the correctly rounded one does not
    r = torch.full((32,), tiny, dtype=torch.float64) * torch.arange(1, 33, dtype=torch.float64)
    y = r.to(getattr(torch, dtype))
    E = torch.zeros_like(r)
    assert elementwise_metrics(y, r, dtype, bound=E)["bound"]["violations"] == 0
    off = (y.double() * 4 + tiny * 16).to(getattr(torch, dtype))
    assert elementwise_metrics(off, r, dtype, bound=E)["bound"]["violations"] == 32
