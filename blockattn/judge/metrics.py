"""Error metrics of one output tensor against its FP64 oracle, with the formulas and their reasons.

Notation: y = provider output (upcast to float64), r = FP64 oracle, e = |y - r| elementwise,
eps = machine epsilon of the case dtype (bf16 2^-7, fp16 2^-10, fp32 2^-23).

* max_abs = max e;  mean_abs = mean e.
* max_rel = max e / max(|r|, REL_FLOOR_FRAC * rms(r)).  Elements far below the tensor's RMS are
  dominated by cancellation, so their relative error says nothing; flooring the denominator at
  1% of rms(r) keeps max_rel meaningful (an all-zero r gives denominator TINY).
* snr_db = 10 log10(sum r^2 / sum e^2)  (+inf when e == 0; -inf when r == 0 but e != 0).
* rounding floor = max |round_to_dtype(r) - r|: the error of a *perfect* kernel that rounds once.
* floor_eff = max(rounding floor, 0.5 * eps * max|r|, atol_floor), over the finite elements of
  r.  When r happens to be exactly representable (zeros, near-constant inputs) the rounding
  floor is 0 and any ratio to it would be infinite; half an ulp at the tensor's largest
  magnitude is what one rounding could cost, and atol_floor (from the tolerance file, default
  ATOL_FLOOR[dtype]) covers an all-zero r.
* ratio_to_floor = max_abs / floor_eff: "how many perfect roundings of error" - dtype-agnostic.
* over_tol: elements with e > N_ULP * eps * (|r| + rms(r)); an elementwise ~N_ULP-ulp band,
  the rms term because attention outputs/grads are sums whose absolute error scales with the
  row magnitude, not with the (possibly cancelled) element.
* nonfinite_bad: NaN/Inf in y where r is finite - always a failure.

Per element (blockattn/bounds/elementwise.py; fields in blockattn/bounds/RECORD.md): "ulp" (error
in ulps of the exact value: % correctly rounded, % faithful, quantiles, histogram, worst element)
and "bound" (elements beyond the provider's accuracy-model bound, when the run has one).
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


# Tensors are reduced in chunks of CHUNK elements, on the oracle's device: at shape P one tensor
# holds 733 M elements, and whole-tensor fp64 temporaries (~10 of them) would need ~60 GB.
CHUNK = 1 << 25


def _floor_eff(rounding: float, amax: float, dtype_name: str, atol_floor: float | None) -> float:
    atol = ATOL_FLOOR[dtype_name] if atol_floor is None else atol_floor
    return max(rounding, 0.5 * EPS[dtype_name] * amax, atol)


def rounding_floor(ref: torch.Tensor, dtype: torch.dtype) -> float:
    if ref.numel() == 0:
        return 0.0
    return float((ref.to(dtype).to(torch.float64) - ref).abs().max())


def effective_floor(ref: torch.Tensor, dtype_name: str, atol_floor: float | None = None) -> float:
    if ref.numel() == 0:
        return ATOL_FLOOR[dtype_name] if atol_floor is None else atol_floor
    from blockattn.cases.spec import DTYPES

    amax = float(ref.abs().max())
    return _floor_eff(rounding_floor(ref, DTYPES[dtype_name]), amax, dtype_name, atol_floor)


def _finite(x: float) -> float | None:
    """JSON has no inf/nan: map them to None, callers read None as 'unbounded'."""
    return x if math.isfinite(x) else None


def _chunks(t: torch.Tensor, device: torch.device) -> list[torch.Tensor]:
    flat = t.detach().reshape(-1)
    return [
        flat[i : i + CHUNK].to(device=device, dtype=torch.float64)
        for i in range(0, flat.numel(), CHUNK)
    ]


def _empty_metrics(n: int, floor_eff: float) -> dict[str, Any]:
    return dict(
        numel=n, floor_eff=floor_eff, max_abs=0.0, mean_abs=0.0, max_rel=0.0, snr_db=None,
        snr_inf=True, rounding_floor=0.0, ratio_to_floor=0.0, over_tol=0, pct_over_tol=0.0,
        nonfinite_bad=0, ref_nonfinite=0, worst=None, ref_max_abs=0.0,
    )  # fmt: skip


def tensor_metrics(
    out: torch.Tensor,
    ref: torch.Tensor,
    dtype_name: str,
    *,
    atol_floor: float | None = None,
    bound: torch.Tensor | None = None,
    model: Any = None,  # blockattn.bounds.models.Model the bound was computed for
    tmap: Any = None,  # blockattn.bounds.elementwise.TokenMap of the case
) -> dict[str, Any]:
    """The module docstring's metrics of `out` against `ref`, computed on `ref`'s device."""
    from blockattn.bounds.elementwise import elementwise_metrics

    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"shape mismatch: output {tuple(out.shape)} vs oracle {tuple(ref.shape)}")
    if bound is not None and tuple(bound.shape) != tuple(ref.shape):
        raise ValueError(f"shape mismatch: bound {tuple(bound.shape)} vs oracle {tuple(ref.shape)}")
    res = _whole_tensor_metrics(out, ref, dtype_name, atol_floor)
    el = elementwise_metrics(
        out, ref, dtype_name, bound=bound, c=model.c if model is not None else 1.0, tmap=tmap
    )
    if el["bound"] is not None:
        el["bound"] = {"model": model.name, "c": model.c, "model_sha": model.sha, **el["bound"]}
    return {**res, **_json_safe(el)}


def _json_safe(x: Any) -> Any:
    """Non-finite floats -> None (JSON has no inf/nan; records read None as 'unbounded')."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    return x


def _whole_tensor_metrics(
    out: torch.Tensor, ref: torch.Tensor, dtype_name: str, atol_floor: float | None
) -> dict[str, Any]:
    from blockattn.bounds.elementwise import unravel
    from blockattn.cases.spec import DTYPES

    n = ref.numel()
    if n == 0:
        return _empty_metrics(0, effective_floor(ref, dtype_name, atol_floor))
    dev, dt = ref.device, DTYPES[dtype_name]

    def rounding(x: torch.Tensor) -> torch.Tensor:
        return (x.to(dt).to(torch.float64) - x).abs().max()

    # Pass 1, oracle only: count of non-finite r; sum of squares, max and rounding floor of the
    # finite part (a NaN in r must not turn the floor, and so every ratio, into NaN).
    p1 = []
    for r in _chunks(ref, dev):
        finite = torch.isfinite(r)
        rf = torch.where(finite, r, torch.zeros_like(r))
        p1.append(((~finite).sum(), rf.pow(2).sum(), rf.abs().max(), rounding(rf)))
    nonfinite_t, sumsq_t, amax_t, floor_t = (torch.stack(col) for col in zip(*p1, strict=True))
    sumsq, amax, floor_rf = float(sumsq_t.sum()), float(amax_t.max()), float(floor_t.max())
    floor_eff = _floor_eff(floor_rf, amax, dtype_name, atol_floor)
    rms = math.sqrt(sumsq / n)
    rel_floor = max(REL_FLOOR_FRAC * rms, TINY)

    # Pass 2: errors. Non-finite outputs where r is finite are forced to +inf error so they
    # dominate max/worst; elements where r is non-finite are left out (error 0).
    bad = over = 0
    e_sum = e_sq = 0.0
    e_max, rel_max, worst_at = -1.0, 0.0, 0
    for i, (y, r) in enumerate(zip(_chunks(out, dev), _chunks(ref, dev), strict=True)):
        ref_finite = torch.isfinite(r)
        bad_here = (~torch.isfinite(y)) & ref_finite
        bad += int(bad_here.sum())
        rf = torch.where(ref_finite, r, torch.zeros_like(r))
        e = torch.where(ref_finite, (y - r).abs(), torch.zeros_like(r))
        e = torch.where(bad_here, torch.full_like(e, math.inf), e)
        e_sum += float(e.sum())
        e_sq += float(e.pow(2).sum())
        rel_max = max(rel_max, float((e / torch.clamp(rf.abs(), min=rel_floor)).max()))
        over += int((e > N_ULP * EPS[dtype_name] * (rf.abs() + rms)).sum())
        j = int(torch.argmax(e))  # first max; inf (non-finite output) wins
        if float(e[j]) > e_max:  # strict: the first chunk holding the max keeps it
            e_max, worst_at = float(e[j]), i * CHUNK + j

    sig = sumsq
    if e_sq == 0.0:
        snr = math.inf
    elif sig == 0.0 or not math.isfinite(e_sq):
        snr = -math.inf
    else:
        snr = 10.0 * math.log10(sig / e_sq)
    idx = unravel(worst_at, tuple(ref.shape))
    names = DIM_NAMES.get(ref.dim(), tuple(f"d{i}" for i in range(ref.dim())))
    yv = float(out.reshape(-1)[worst_at])
    return {
        "numel": n,
        "floor_eff": floor_eff,
        "nonfinite_bad": bad,
        "ref_nonfinite": int(nonfinite_t.sum()),
        "max_abs": _finite(e_max),
        "mean_abs": _finite(e_sum / n),
        "max_rel": _finite(rel_max),
        "snr_db": _finite(snr),
        "snr_inf": snr == math.inf,
        "rounding_floor": floor_rf,
        "ratio_to_floor": _finite(e_max / floor_eff),
        "over_tol": over,
        "pct_over_tol": 100.0 * over / n,
        "ref_max_abs": amax,
        "worst": {
            **{nm: int(k) for nm, k in zip(names, idx, strict=True)},
            "value": yv if math.isfinite(yv) else repr(yv),
            "oracle": float(ref.reshape(-1)[worst_at]),
            "abs_err": _finite(e_max),
        },
    }


def ratio(num: float | None, den: float | None, floor: float) -> float | None:
    """num / max(den, floor); None (unbounded) when num is None (non-finite error)."""
    if num is None:
        return None
    d = max(den if den is not None else math.inf, floor)
    return num / d if math.isfinite(d) else 0.0
