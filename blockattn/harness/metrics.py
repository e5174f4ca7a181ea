"""Error metrics of one output tensor against its FP64 oracle, with the formulas and their reasons.

Notation: y = provider output (upcast to float64), r = FP64 oracle, e = |y - r| elementwise,
eps = machine epsilon of the case dtype (bf16 2^-7, fp16 2^-10, fp32 2^-23).

* max_abs = max e;  mean_abs = mean e.
* max_rel = max e / max(|r|, REL_FLOOR_FRAC * rms(r)).  Elements far below the tensor's RMS are
  dominated by cancellation, so their relative error says nothing; flooring the denominator at
  1% of rms(r) keeps max_rel meaningful (an all-zero r gives denominator TINY).
* snr_db = 10 log10(sum r^2 / sum e^2)  (+inf when e == 0; -inf when r == 0 but e != 0).
* rounding floor = max |round_to_dtype(r) - r|: the error of a *perfect* kernel that rounds once.
* floor_eff = max(rounding floor, 0.5 * eps * max|r|, atol_floor).  When r happens to be exactly
  representable (zeros, near-constant inputs) the rounding floor is 0 and any ratio to it would
  be infinite; half an ulp at the tensor's largest magnitude is what one rounding could cost,
  and atol_floor (from the tolerance file, default ATOL_FLOOR[dtype]) covers an all-zero r.
* ratio_to_floor = max_abs / floor_eff: "how many perfect roundings of error" - dtype-agnostic.
* over_tol: elements with e > N_ULP * eps * (|r| + rms(r)); an elementwise ~N_ULP-ulp band,
  the rms term because attention outputs/grads are sums whose absolute error scales with the
  row magnitude, not with the (possibly cancelled) element.
* nonfinite_bad: NaN/Inf in y where r is finite - always a failure.
"""

from __future__ import annotations

import math
from typing import Any

import torch

REL_FLOOR_FRAC = 1e-2
TINY = 1e-30
N_ULP = 4.0
EPS: dict[str, float] = {
    "bfloat16": 2.0**-7,
    "float16": 2.0**-10,
    "float32": 2.0**-23,
}
# Absolute floor for an all-zero oracle: smallest normal number of the dtype's scale we care
# about - a kernel that returns exactly 0 passes, one that returns ~1e-3 does not.
ATOL_FLOOR: dict[str, float] = {"bfloat16": 1e-6, "float16": 1e-7, "float32": 1e-12}

DIM_NAMES = {3: ("token", "head", "dim"), 2: ("row", "col"), 1: ("index",)}


def rounding_floor(ref: torch.Tensor, dtype: torch.dtype) -> float:
    if ref.numel() == 0:
        return 0.0
    return float((ref.to(dtype).to(torch.float64) - ref).abs().max())


def effective_floor(ref: torch.Tensor, dtype_name: str, atol_floor: float | None = None) -> float:
    atol = ATOL_FLOOR[dtype_name] if atol_floor is None else atol_floor
    if ref.numel() == 0:
        return atol
    from blockattn.harness.spec import DTYPES

    amax = float(ref.abs().max())
    return max(rounding_floor(ref, DTYPES[dtype_name]), 0.5 * EPS[dtype_name] * amax, atol)


def _finite(x: float) -> float | None:
    """JSON has no inf/nan: map them to None, callers read None as 'unbounded'."""
    return x if math.isfinite(x) else None


def tensor_metrics(
    out: torch.Tensor,
    ref: torch.Tensor,
    dtype_name: str,
    *,
    atol_floor: float | None = None,
) -> dict[str, Any]:
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"shape mismatch: output {tuple(out.shape)} vs oracle {tuple(ref.shape)}")
    y = out.detach().to(device="cpu", dtype=torch.float64)
    r = ref.detach().to(device="cpu", dtype=torch.float64)
    n = r.numel()
    floor_eff = effective_floor(r, dtype_name, atol_floor)
    res: dict[str, Any] = {"numel": n, "floor_eff": floor_eff}
    if n == 0:
        res.update(
            max_abs=0.0,
            mean_abs=0.0,
            max_rel=0.0,
            snr_db=None,
            snr_inf=True,
            rounding_floor=0.0,
            ratio_to_floor=0.0,
            over_tol=0,
            pct_over_tol=0.0,
            nonfinite_bad=0,
            ref_nonfinite=0,
            worst=None,
            ref_max_abs=0.0,
        )
        return res
    ref_finite = torch.isfinite(r)
    bad = (~torch.isfinite(y)) & ref_finite
    res["nonfinite_bad"] = int(bad.sum())
    res["ref_nonfinite"] = int((~ref_finite).sum())
    # Metrics over elements where both are finite; non-finite outputs are counted above and
    # forced to +inf error so they dominate max/worst.
    e = (y - r).abs()
    e = torch.where(ref_finite, e, torch.zeros_like(e))
    e = torch.where(bad, torch.full_like(e, math.inf), e)
    rf = torch.where(ref_finite, r, torch.zeros_like(r))
    rms = float(rf.pow(2).mean().sqrt())
    amax = float(rf.abs().max())
    max_abs = float(e.max())
    res["max_abs"] = _finite(max_abs)
    res["mean_abs"] = _finite(float(e.mean()))
    rel_den = torch.clamp(rf.abs(), min=max(REL_FLOOR_FRAC * rms, TINY))
    res["max_rel"] = _finite(float((e / rel_den).max()))
    sig, noise = float(rf.pow(2).sum()), float(e.pow(2).sum())
    if noise == 0.0:
        snr = math.inf
    elif sig == 0.0 or not math.isfinite(noise):
        snr = -math.inf
    else:
        snr = 10.0 * math.log10(sig / noise)
    res["snr_db"] = _finite(snr)
    res["snr_inf"] = snr == math.inf
    from blockattn.harness.spec import DTYPES

    res["rounding_floor"] = rounding_floor(rf, DTYPES[dtype_name])
    res["ratio_to_floor"] = _finite(max_abs / floor_eff)
    tol = N_ULP * EPS[dtype_name] * (rf.abs() + rms)
    over = int((e > tol).sum())
    res["over_tol"] = over
    res["pct_over_tol"] = 100.0 * over / n
    res["ref_max_abs"] = amax
    flat = int(torch.argmax(e.flatten()))  # first max; inf (non-finite output) wins
    idx = list(torch.unravel_index(torch.tensor(flat), tuple(r.shape)))
    names = DIM_NAMES.get(r.dim(), tuple(f"d{i}" for i in range(r.dim())))
    yv = float(y.flatten()[flat])
    res["worst"] = {
        **{nm: int(i) for nm, i in zip(names, idx, strict=True)},
        "value": yv if math.isfinite(yv) else repr(yv),
        "oracle": float(r.flatten()[flat]),
        "abs_err": _finite(float(e.flatten()[flat])),
    }
    return res


def ratio(num: float | None, den: float | None, floor: float) -> float | None:
    """num / max(den, floor); None (unbounded) when num is None (non-finite error)."""
    if num is None:
        return None
    d = max(den if den is not None else math.inf, floor)
    return num / d if math.isfinite(d) else 0.0
