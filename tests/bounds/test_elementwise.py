"""ulp, exact rounding, the store bound and the elementwise metrics (blockattn/bounds)."""

from __future__ import annotations

import math

import pytest
import torch

from blockattn.bounds.elementwise import (
    TokenMap,
    elements_apart,
    elementwise_metrics,
    round_to,
    store_bound,
    ulp,
)
from blockattn.cases.generate import offsets_from_lengths


@pytest.mark.parametrize(
    ("dtype", "x", "want"),
    [
        ("bfloat16", 1.0, 2.0**-7),
        ("bfloat16", 1.99, 2.0**-7),
        ("bfloat16", 0.0, 2.0**-133),
        ("float16", 1.0, 2.0**-10),
        ("float16", -3.0, 2.0**-9),
        ("float16", 1e-6, 2.0**-24),  # subnormal spacing
        ("float16", 0.0, 2.0**-24),
        ("float32", 1.0, 2.0**-23),
    ],
)
def test_ulp_known_values(dtype: str, x: float, want: float) -> None:
    assert float(ulp(torch.tensor([x], dtype=torch.float64), dtype)[0]) == want


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_round_to_is_correct_rounding(dtype: str) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20000, generator=g, dtype=torch.float64) * torch.exp2(
        torch.randint(-30, 10, (20000,), generator=g).double()
    )
    y = round_to(x, dtype)
    assert torch.equal(round_to(y, dtype), y)  # representable
    u = ulp(x, dtype)
    assert bool(((y - x).abs() <= 0.5 * u).all())  # nearest
    # Every representable neighbour is at least as far: the one-ulp neighbours on both sides.
    for nb in (y + ulp(y, dtype), y - ulp(y, dtype)):
        assert bool(((nb - x).abs() >= (y - x).abs()).all())


def test_torch_half_cast_double_rounds_and_round_to_does_not() -> None:
    """The reason round_to exists: float64 -> float16 in torch goes through float32."""
    x = torch.tensor([-0.11318969771495481], dtype=torch.float64)
    lo, hi = -0.1131591796875, -0.11322021484375  # the two fp16 neighbours
    nearest = hi if abs(hi - float(x)) < abs(lo - float(x)) else lo
    assert float(round_to(x, "float16")[0]) == nearest
    assert float(x.to(torch.float16)) != nearest


def test_store_bound_zero_allowance_is_correct_rounding() -> None:
    r = torch.tensor([1.0 + 2.0**-9, 3.3, -7.1e-3], dtype=torch.float64)
    b = store_bound(r, torch.zeros_like(r), "bfloat16")
    assert torch.equal(b, (round_to(r, "bfloat16") - r).abs())


def _case():
    g = torch.Generator().manual_seed(3)
    offsets = offsets_from_lengths([70, 5, 64])
    T, H, D = 139, 2, 16
    ref = torch.randn(T, H, D, generator=g, dtype=torch.float64)
    return offsets, ref, TokenMap(offsets, T, 64, torch.device("cpu"))


def test_correctly_rounded_output_scores_100_percent() -> None:
    _, ref, tmap = _case()
    out = round_to(ref, "bfloat16").to(torch.bfloat16)
    m = elementwise_metrics(out, ref, "bfloat16", bound=torch.zeros_like(ref), tmap=tmap)
    assert m["ulp"]["pct_correctly_rounded"] == 100.0
    assert m["ulp"]["quantiles"]["max"] <= 0.5
    assert m["bound"]["violations"] == 0


def test_one_planted_error_is_located_and_counted() -> None:
    _, ref, tmap = _case()
    y = round_to(ref, "bfloat16")
    tok, head, dim = 72, 1, 9  # sequence 1 (tokens 70-74), block 0, row 2
    y[tok, head, dim] += 3 * ulp(y[tok, head, dim : dim + 1], "bfloat16")[0]
    m = elementwise_metrics(y.to(torch.bfloat16), ref, "bfloat16",
                            bound=torch.zeros_like(ref, dtype=torch.float32), tmap=tmap)
    assert m["bound"]["violations"] == 1
    w = m["bound"]["worst"]
    assert (w["token"], w["head"], w["dim"], w["seq"], w["block"], w["row"]) == (72, 1, 9, 1, 0, 2)
    assert m["ulp"]["worst"]["token"] == 72 and m["ulp"]["worst"]["ulp"] > 2.5
    loc = m["bound"]["loc"]
    assert loc["by_head"][1] > 1 and loc["by_head"][0] <= 1
    assert loc["row_dim"][2][9] > 1 and max(loc["row_dim"][0]) <= 1
    assert m["ulp"]["pct_correctly_rounded"] == pytest.approx(100 * (1 - 1 / ref.numel()))


def test_nonfinite_output_is_a_violation_and_worst() -> None:
    _, ref, tmap = _case()
    y = round_to(ref, "float16").to(torch.float16)
    y[3, 0, 2] = math.inf
    m = elementwise_metrics(y, ref, "float16", bound=torch.ones_like(ref), tmap=tmap)
    assert m["bound"]["violations"] == 1 and m["ulp"]["hist"]["nonfinite"] == 1
    assert m["ulp"]["quantiles"]["max"] is None and m["bound"]["worst"]["token"] == 3


def test_overflowing_bound_and_nonfinite_values_stay_json_safe() -> None:
    """A bound whose r + cE overflows fp16, an inf output and an inf oracle element: the record
    must still serialise with allow_nan=False (None = unbounded)."""
    import json

    from blockattn.bounds.models import Model
    from blockattn.judge.metrics import tensor_metrics

    r = torch.tensor([[[6.0e4, 1.0, math.inf]]], dtype=torch.float64)
    y = torch.tensor([[[math.inf, 1.0, 2.0]]], dtype=torch.float16)
    e = torch.tensor([[[1.0e4, 0.0, 0.0]]], dtype=torch.float32)
    model = Model("m", 2.0, {}, {}, {})
    m = tensor_metrics(y, r, "float16", bound=e, model=model)
    json.dumps(m, allow_nan=False)
    assert m["bound"]["violations"] == 0  # inf output within an overflowing allowance
    assert m["nonfinite_bad"] == 1


def test_growth_and_not_tiny_known_answers() -> None:
    """bf16 (ulp 2^-8 in [0.5, 1)), allowance cE = 2^-6 everywhere:
    r = 1 stored exactly; r = 2^-12 (below 2^-10 max|r|: tiny) off by 2^-15 = 16 of its ulps
    (2^-19); r = 0.5 off by one ulp 2^-8. Growth = min b / e: at 0.5, b = 2^-6 (0.5 +- 2^-6 are
    bf16 numbers) over e = 2^-8 -> 4; at the tiny one b ~ 2^-6 over 2^-15 -> ~512. Not tiny:
    the max ulp and the correctly rounded share over {1, 0.5}: 1 ulp and 50 %."""
    ref = torch.tensor([1.0, 2.0**-12, 0.5], dtype=torch.float64)
    out = torch.tensor([1.0, 2.0**-12 + 2.0**-15, 0.5 + 2.0**-8], dtype=torch.float64)
    m = elementwise_metrics(out, ref, "bfloat16", bound=torch.full((3,), 2.0**-6), c=1.0)
    assert m["ulp"]["quantiles"]["max"] == 16.0
    nt = m["ulp"]["not_tiny"]
    assert (nt["n"], nt["max"], nt["pct_correctly_rounded"]) == (2, 1.0, 50.0)
    assert m["bound"]["growth"] == 4.0
    assert m["bound"]["violations"] == 0
    exact = elementwise_metrics(ref, ref, "bfloat16", bound=torch.full((3,), 2.0**-6), c=1.0)
    assert exact["bound"]["growth"] is None  # no element has an error to grow
    # a violation reads as growth < 1
    bad = elementwise_metrics(out, ref, "bfloat16", bound=torch.full((3,), 2.0**-10), c=1.0)
    assert bad["bound"]["violations"] == 1 and bad["bound"]["growth"] < 1.0


def test_elements_apart_known_answers() -> None:
    """The kernel-vs-kernel agreement rule: 1 ulp of a's dtype + 2^-16 of max |b|, a finite."""
    b = torch.tensor([1.0, -3.0, 2.0**-20, 100.0], dtype=torch.float64)
    a = b.to(torch.bfloat16)  # each exactly representable: 0 apart
    assert elements_apart(a, b) == 0
    one_ulp = torch.tensor([1.0 + 2.0**-7, -3.0, 2.0**-20, 100.0]).to(torch.bfloat16)
    assert elements_apart(one_ulp, b) == 0  # 1 ulp of bf16 at 1.0 is 2^-7
    two_ulp = torch.tensor([1.0 + 2.0**-6, -3.0, 2.0**-20, 100.0]).to(torch.bfloat16)
    # 2^-6 > 2^-7 * (1 + 2^-6) + 2^-16 * 100 = 0.00946...: apart
    assert elements_apart(two_ulp, b) == 1
    # near zero the scale term decides: 2^-20 + 2^-10 is within 2^-16 * 100 of 2^-20
    small = torch.tensor([1.0, -3.0, 2.0**-20 + 2.0**-10, 100.0]).to(torch.bfloat16)
    assert elements_apart(small, b) == 0
    for bad in (float("inf"), float("-inf"), float("nan")):
        poisoned = a.clone()
        poisoned[0] = bad
        assert elements_apart(poisoned, b) == 1, bad



def test_unravel_places_the_worst_element_by_known_answers():
    """The coordinates every report names: known answers, then torch's own routine on random
    shapes, and an index outside the shape refused."""
    from blockattn.bounds.elementwise import unravel

    assert unravel(0, (3, 4, 5)) == (0, 0, 0)
    assert unravel(59, (3, 4, 5)) == (2, 3, 4)
    assert unravel(27, (3, 4, 5)) == (1, 1, 2)  # 27 = 1*20 + 1*5 + 2
    assert unravel(6, (7,)) == (6,)
    gen = torch.Generator().manual_seed(3)
    for _ in range(200):
        shape = tuple(int(s) for s in torch.randint(1, 9, (int(torch.randint(1, 5, ())),),
                                                     generator=gen))  # fmt: skip
        flat = int(torch.randint(0, math.prod(shape), (), generator=gen))
        want = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape))
        assert unravel(flat, shape) == want
    with pytest.raises(IndexError):
        unravel(60, (3, 4, 5))
