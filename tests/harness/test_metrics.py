"""Metrics on hand-computable inputs (each expected value is worked out in the comment)."""

from __future__ import annotations

import math

import pytest
import torch

from blockattn.judge import metrics


def test_exact_output_has_zero_error_and_infinite_snr() -> None:
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(5, 2, 4, generator=g, dtype=torch.float64).to(torch.bfloat16).double()
    m = metrics.tensor_metrics(ref.to(torch.bfloat16), ref, "bfloat16")
    assert m["max_abs"] == 0.0 and m["mean_abs"] == 0.0 and m["ratio_to_floor"] == 0.0
    assert m["snr_db"] is None and m["snr_inf"] is True
    assert m["rounding_floor"] == 0.0  # ref is bf16-representable...
    # ...so floor_eff falls back to half an ulp at max|ref|: 0.5 * 2^-7 * max|ref|.
    assert m["floor_eff"] == pytest.approx(0.5 * 2**-7 * float(ref.abs().max()))


def test_single_error_hand_computed() -> None:
    ref = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]]], dtype=torch.float64)  # (T=2, H=1, D=2)
    out = ref.clone()
    out[1, 0, 0] = 3.5  # one error of 0.5 at token 1, head 0, dim 0
    m = metrics.tensor_metrics(out, ref, "float32")
    assert m["max_abs"] == 0.5
    assert m["mean_abs"] == pytest.approx(0.5 / 4)
    # SNR = 10 log10((1 + 4 + 9 + 16) / 0.25) = 10 log10(120)
    assert m["snr_db"] == pytest.approx(10 * math.log10(120.0))
    assert m["max_rel"] == pytest.approx(0.5 / 3.0)
    w = m["worst"]
    assert (w["token"], w["head"], w["dim"]) == (1, 0, 0)
    assert w["value"] == 3.5 and w["oracle"] == 3.0
    assert m["over_tol"] == 1 and m["pct_over_tol"] == pytest.approx(25.0)


def test_rounding_floor_is_half_ulp_of_the_rounded_value() -> None:
    # 1 + 2^-9 rounds to 1 in bf16 (ulp(1) = 2^-7): the floor is exactly 2^-9.
    ref = torch.tensor([1.0 + 2**-9, 0.25], dtype=torch.float64)
    assert metrics.rounding_floor(ref, torch.bfloat16) == 2**-9
    out = torch.tensor([1.0 + 2**-7, 0.25], dtype=torch.float64)  # error 2^-7 - 2^-9 = 3*2^-9
    m = metrics.tensor_metrics(out, ref, "bfloat16")
    # floor_eff = max(2^-9, 0.5 * 2^-7 * (1 + 2^-9), 1e-6) = 2^-8 * (1 + 2^-9)
    assert m["floor_eff"] == pytest.approx(2**-8 * (1 + 2**-9))
    assert m["ratio_to_floor"] == pytest.approx(3 * 2**-9 / (2**-8 * (1 + 2**-9)))


def test_zero_oracle_uses_atol_floor_so_bounds_never_vanish() -> None:
    ref = torch.zeros(3, 1, 2, dtype=torch.float64)
    ok = metrics.tensor_metrics(torch.zeros(3, 1, 2), ref, "bfloat16")
    assert ok["floor_eff"] == metrics.ATOL_FLOOR["bfloat16"] > 0
    assert ok["ratio_to_floor"] == 0.0
    out = torch.zeros(3, 1, 2)
    out[2, 0, 1] = 1e-3
    bad = metrics.tensor_metrics(out, ref, "bfloat16")
    assert bad["ratio_to_floor"] == pytest.approx(1e-3 / 1e-6, rel=1e-6)
    assert bad["snr_db"] is None and bad["snr_inf"] is False  # -inf: signal 0, noise > 0
    # An explicit atol_floor (from a tolerance file) replaces the default.
    assert metrics.effective_floor(ref, "bfloat16", atol_floor=1e-2) == 1e-2


def test_max_rel_denominator_is_floored_at_one_percent_of_rms() -> None:
    ref = torch.tensor([1.0, 0.0], dtype=torch.float64)
    out = torch.tensor([1.0, 0.01], dtype=torch.float64)
    m = metrics.tensor_metrics(out, ref, "float32")
    rms = math.sqrt(0.5)
    assert m["max_rel"] == pytest.approx(0.01 / (metrics.REL_FLOOR_FRAC * rms))


def test_nan_where_oracle_finite_is_counted_and_dominates() -> None:
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(4, 2, 8, generator=g, dtype=torch.float64)
    out = ref.clone()
    out[3, 1, 5] = float("nan")
    out[0, 0, 0] = float("inf")
    m = metrics.tensor_metrics(out, ref, "float16")
    assert m["nonfinite_bad"] == 2
    assert m["max_abs"] is None and m["ratio_to_floor"] is None and m["snr_db"] is None
    assert m["worst"]["value"] in ("nan", "inf")


def test_nan_in_oracle_is_not_blamed_on_the_output() -> None:
    ref = torch.tensor([1.0, float("nan")], dtype=torch.float64)
    out = torch.tensor([1.0, float("nan")], dtype=torch.float64)
    m = metrics.tensor_metrics(out, ref, "float32")
    assert m["nonfinite_bad"] == 0 and m["ref_nonfinite"] == 1 and m["max_abs"] == 0.0


def test_empty_tensor_and_shape_mismatch() -> None:
    m = metrics.tensor_metrics(torch.zeros(0, 2, 4), torch.zeros(0, 2, 4).double(), "bfloat16")
    assert m["max_abs"] == 0.0 and m["numel"] == 0 and m["floor_eff"] > 0
    with pytest.raises(ValueError, match="shape mismatch"):
        metrics.tensor_metrics(torch.zeros(2, 2), torch.zeros(2, 3).double(), "bfloat16")


def test_bf16_rounding_of_random_data_sits_at_the_floor() -> None:
    # Rounding the oracle once is the "perfect kernel": its error/floor must be exactly 1 when
    # the floor is the rounding floor (which dominates half an ulp at max for random data).
    g = torch.Generator().manual_seed(2)
    ref = torch.randn(64, 2, 16, generator=g, dtype=torch.float64)
    m = metrics.tensor_metrics(ref.to(torch.bfloat16), ref, "bfloat16")
    assert 0.5 <= m["ratio_to_floor"] <= 1.0 + 1e-12
    assert m["over_tol"] == 0  # one rounding is inside the N-ulp band


def test_ratio_guard() -> None:
    assert metrics.ratio(2.0, 0.0, 0.5) == 4.0  # zero-error baseline: floor guards the division
    assert metrics.ratio(None, 1.0, 0.5) is None
    assert metrics.ratio(1.0, None, 0.5) == 0.0  # non-finite baseline: kernel wins


def test_chunked_reduction_matches_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large tensors are reduced in chunks (metrics.CHUNK); the result must not depend on it:
    maxima, counts and the worst element exactly, sums up to fp64 reassociation (1e-12)."""
    g = torch.Generator().manual_seed(11)
    ref = torch.randn(700, 3, 8, generator=g, dtype=torch.float64)
    out = (ref + 1e-2 * torch.randn(ref.shape, generator=g, dtype=torch.float64)).to(
        torch.bfloat16
    )
    out[600, 2, 5] = float("inf")  # the worst element sits in the last chunk
    ref[3, 0, 0] = float("nan")  # a non-finite oracle element is left out, and counted
    whole = metrics.tensor_metrics(out, ref, "bfloat16")
    monkeypatch.setattr(metrics, "CHUNK", 1000)  # 17 chunks, the last one partial
    chunked = metrics.tensor_metrics(out, ref, "bfloat16")
    assert whole["worst"] == chunked["worst"] and whole["worst"]["token"] == 600
    for key, val in whole.items():
        if isinstance(val, float):
            assert chunked[key] == pytest.approx(val, rel=1e-12), key
        else:
            assert chunked[key] == val, key
    assert chunked["nonfinite_bad"] == 1 and chunked["ref_nonfinite"] == 1
