"""Per-element error of an output tensor: ulps of the exact value, and the model's bound.

For every element with a finite FP64 oracle value r and output y (ERROR_ANALYSIS.md §1, §3):

* e = |y - r| (y non-finite: e = inf);
* ulp(r) = 2^(floor(log2 |r|) - p + 1) in the output format, never below the subnormal spacing
  2^(emin - p + 1): e / ulp(r) is the error in ulps of the exact value; e <= ulp/2 is "correctly
  rounded", e <= ulp "faithful";
* bound: the implementation's pre-store value y~ satisfies |y~ - r| <= c E (E from
  `oracles.error_bound`), and round-to-nearest is monotone, so the stored y lies between
  round(r - cE) and round(r + cE): b = max(|round(r - cE) - r|, |round(r + cE) - r|). y violates
  the model when e > b. With E = 0 this is exactly "correctly rounded". Headroom: the ratio
  max(0, e - ulp/2) / (cE) is the pre-store error the stored value implies, as a share of the
  model's allowance (0: correctly rounded; > 1: violation). Growth: min over elements with e > 0
  of b / e, the factor by which the worst element's stored error could grow before it violates.
* not tiny: the ulp count of an element whose exact value is far below the tensor's scale
  measures cancellation, not the kernel (sums over values of the scale carry absolute errors of
  their ulp, which is 2^10 ulps of |r| = 2^-10 max|r|). `ulp.not_tiny` repeats the max ulp and the
  correctly rounded share over the elements with |r| >= NOT_TINY max |r|.

Everything reduces chunk by chunk on the oracle's device (shape P: 733 M elements per tensor).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from blockattn.dtypes import DTYPES

# (significand bits p incl. the implicit one, emin) of the output formats.
FORMAT: dict[str, tuple[int, int]] = {"bfloat16": (8, -126), "float16": (11, -14),
                                      "float32": (24, -126)}
HIST_LO, HIST_STEP, HIST_BINS = -8.0, 0.25, 192  # log2(e/ulp) from 2^-8 to 2^40 ulp
QUANTILES = {"p50": 0.5, "p99": 0.99, "p99.9": 0.999, "p99.99": 0.9999}
LOC_BUCKETS = 256  # blocks merged into at most this many buckets in the localisation view
NOT_TINY = 2.0**-10  # |r| >= NOT_TINY * max|r|: an element whose ulp count measures the kernel


def ulp(r: torch.Tensor, dtype_name: str) -> torch.Tensor:
    """ulp in `dtype_name` of the FP64 values r (the subnormal spacing at and below 2^emin)."""
    p, emin = FORMAT[dtype_name]
    _, e = torch.frexp(r)  # r = m 2^e, m in [0.5, 1): floor(log2 |r|) = e - 1
    e = torch.clamp(e.to(torch.float64), min=emin + 1)
    e = torch.where(r == 0, torch.full_like(e, emin + 1), e)
    return torch.exp2(e - p)


MAX_FINITE: dict[str, float] = {
    n: float(torch.finfo(t).max) for n, t in DTYPES.items()
}


def round_to(x: torch.Tensor, dtype_name: str) -> torch.Tensor:
    """FP64 x rounded to nearest-even in `dtype_name`, as FP64. Exact: x / ulp is an FP64
    integer-or-half, so torch.round (half to even) decides. torch's own float64 -> float16 cast
    rounds twice (through float32) and is off by an ulp next to midpoints: not used here."""
    u = ulp(x, dtype_name)
    y = torch.round(x / u) * u
    top = MAX_FINITE[dtype_name]
    half_ulp_top = 0.5 * float(ulp(torch.tensor([top], dtype=torch.float64), dtype_name)[0])
    return torch.where(x.abs() >= top + half_ulp_top, torch.copysign(torch.full_like(x, math.inf),
                                                                     x), y)


def store_bound(r: torch.Tensor, cE: torch.Tensor, dtype_name: str) -> torch.Tensor:
    """max |round(r +- cE) - r|: the largest error a correct store of a value within cE of r has."""
    lo = (round_to(r - cE, dtype_name) - r).abs()
    hi = (round_to(r + cE, dtype_name) - r).abs()
    return torch.maximum(lo, hi)


class TokenMap:
    """token -> (sequence, block within the sequence, row within the block, global block)."""

    def __init__(self, offsets: torch.Tensor, T: int, block: int, device: torch.device) -> None:
        off = offsets.to(device=device, dtype=torch.int64)
        tok = torch.arange(T, device=device)
        self.seq = torch.searchsorted(off[1:], tok, right=True)
        pos = tok - off[:-1][self.seq] if T else tok
        self.block, self.row = pos // block, pos % block
        lens = off[1:] - off[:-1]
        nblk = (lens + block - 1) // block
        first = torch.cumsum(nblk, 0) - nblk
        self.gblock = first[self.seq] + self.block if T else tok
        self.n_blocks = int(nblk.sum()) if lens.numel() else 0
        self.block_size = block

    def coords(self, token: int) -> dict[str, int]:
        return {"seq": int(self.seq[token]), "block": int(self.block[token]),
                "row": int(self.row[token])}


def elements_apart(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements of a beyond 1 ulp (of a's dtype) + 2^-16 of b's largest magnitude from b, or
    non-finite: the agreement rule of two kernels that form the same products with their fp32
    sums in another order (chunked vs whole-tile bodies, the Gluon vs the portable kernels)."""
    fa, fb = a.double(), b.double()
    tol = torch.finfo(a.dtype).eps * torch.maximum(fa.abs(), fb.abs()) + 2.0**-16 * float(
        fb.abs().max())
    # isfinite: an infinite a makes its own tolerance infinite, so |a - b| <= tol alone passes it
    return int((~(torch.isfinite(fa) & ((fa - fb).abs() <= tol))).sum())


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The row-major index of element `flat` of `shape` (torch.unravel_index without its
    milliseconds of argument checking: the judge asks it for every tensor it reports)."""
    if not 0 <= flat < max(1, math.prod(shape)):
        raise IndexError(f"flat index {flat} outside shape {tuple(shape)}")
    idx = []
    for n in reversed(shape):
        flat, i = divmod(flat, n) if n else (flat, 0)
        idx.append(i)
    return tuple(reversed(idx))


def _coords(flat: int, shape: tuple[int, ...], tmap: TokenMap | None) -> dict[str, int]:
    names = {3: ("token", "head", "dim"), 2: ("row", "col"), 1: ("index",)}.get(len(shape))
    idx = unravel(flat, shape)
    if names is None:
        names = tuple(f"d{i}" for i in range(len(shape)))
    out = {n: int(i) for n, i in zip(names, idx, strict=True)}
    if tmap is not None and len(shape) == 3:
        out.update(tmap.coords(out["token"]))
    return out


def _quantiles(counts: list[int], n: int, vmax: float) -> dict[str, float | None]:
    """Upper bin edge (conservative) of each quantile; exact zeros sit below bin 0."""
    out: dict[str, float | None] = {}
    for name, q in QUANTILES.items():
        need, acc, val = math.ceil(q * n), 0, 0.0
        if need > 0:
            for i, c in enumerate(counts):
                acc += c
                if acc >= need:
                    val = 2.0 ** (HIST_LO + (i + 1) * HIST_STEP)
                    break
            else:
                val = math.inf
        out[name] = min(val, vmax) if math.isfinite(val) else None
    out["max"] = vmax if math.isfinite(vmax) else None
    return out


def elementwise_metrics(
    out: torch.Tensor,
    ref: torch.Tensor,
    dtype_name: str,
    *,
    bound: torch.Tensor | None = None,
    c: float = 1.0,
    tmap: TokenMap | None = None,
    chunk: int = 1 << 24,
) -> dict[str, Any]:
    """{"ulp": ..., "bound": ... | None} as in blockattn/bounds/RECORD.md (bound: E, unscaled)."""
    dev, shape = ref.device, tuple(ref.shape)
    y_all, r_all = out.detach().reshape(-1), ref.detach().reshape(-1)
    b_all = None if bound is None else bound.detach().reshape(-1)
    n_fin = n_cr = n_faith = n_exact = n_bad = n_viol = 0
    n_big = n_big_cr = 0
    worst_big, growth = 0.0, math.inf
    r_max = 0.0  # first pass: the tensor's scale, for `not_tiny`
    for i0 in range(0, r_all.numel(), chunk):
        r = r_all[i0 : i0 + chunk].to(device=dev, dtype=torch.float64).abs()
        r = torch.where(torch.isfinite(r), r, torch.zeros_like(r))
        r_max = max(r_max, float(r.max()) if r.numel() else 0.0)
    big_at = NOT_TINY * r_max
    hist = torch.zeros(HIST_BINS, dtype=torch.int64, device=dev)
    worst_u, worst_u_at = -1.0, -1
    worst_r, worst_r_at = -1.0, -1
    is3 = len(shape) == 3 and tmap is not None
    if is3:
        H, D = shape[1], shape[2]
        bucket = max(1, math.ceil(tmap.n_blocks / LOC_BUCKETS))
        row_dim = torch.zeros(tmap.block_size * D, dtype=torch.float64, device=dev)
        by_head = torch.zeros(H, dtype=torch.float64, device=dev)
        by_block = torch.zeros(max(1, math.ceil(tmap.n_blocks / bucket)), dtype=torch.float64,
                               device=dev)
    for i0 in range(0, r_all.numel(), chunk):
        r = r_all[i0 : i0 + chunk].to(device=dev, dtype=torch.float64)
        y = y_all[i0 : i0 + chunk].to(device=dev, dtype=torch.float64)
        fin = torch.isfinite(r)
        bad = fin & ~torch.isfinite(y)
        rf = torch.where(fin, r, torch.zeros_like(r))
        e = torch.where(fin, (y - r).abs(), torch.zeros_like(r))
        e = torch.where(bad, torch.full_like(e, math.inf), e)
        u = ulp(rf, dtype_name)
        eu = e / u
        n_fin += int(fin.sum())
        n_bad += int(bad.sum())
        n_cr += int((fin & (eu <= 0.5)).sum())
        n_faith += int((fin & (eu <= 1.0)).sum())
        n_exact += int((fin & (e == 0)).sum())
        nz = fin & (e > 0) & ~bad
        lg = torch.log2(eu[nz])
        b_idx = torch.clamp(((lg - HIST_LO) / HIST_STEP).floor(), 0, HIST_BINS - 1).long()
        hist += torch.bincount(b_idx, minlength=HIST_BINS)
        eu_f = torch.where(fin, eu, torch.zeros_like(eu))
        big = fin & (rf.abs() >= big_at) & (rf != 0)
        n_big += int(big.sum())
        n_big_cr += int((big & (eu <= 0.5)).sum())
        if bool(big.any()):
            worst_big = max(worst_big, float(torch.where(big, eu, torch.zeros_like(eu)).max()))
        j = int(torch.argmax(eu_f))
        if float(eu_f[j]) > worst_u:
            worst_u, worst_u_at = float(eu_f[j]), i0 + j
        if b_all is not None:
            cE = c * b_all[i0 : i0 + chunk].to(device=dev, dtype=torch.float64)
            bnd = store_bound(rf, cE, dtype_name)
            # Headroom: the pre-store error the stored y implies (at least e - ulp/2 for y to be
            # its rounding) over the allowance cE: 0 when correctly rounded, > 1 near a violation.
            implied = torch.clamp(e - 0.5 * u, min=0.0)
            ratio = torch.where(implied == 0, torch.zeros_like(e), implied / cE)
            viol = fin & (e > bnd)  # the rule; the ratio only reports headroom
            ratio = torch.where(viol, torch.clamp(ratio, min=1.0 + 2.0**-20),
                                torch.clamp(ratio, max=1.0))
            ratio = torch.where(fin, ratio, torch.zeros_like(ratio))
            n_viol += int(viol.sum())
            g = torch.where(fin & (e > 0), bnd / e, torch.full_like(e, math.inf))
            if g.numel():
                growth = min(growth, float(g.min()))
            j = int(torch.argmax(ratio))
            if float(ratio[j]) > worst_r:
                worst_r, worst_r_at = float(ratio[j]), i0 + j
            if is3:
                flat = torch.arange(i0, i0 + r.numel(), device=dev)
                tok, hd, dim = flat // (H * D), (flat // D) % H, flat % D
                rq = torch.nan_to_num(ratio, posinf=1e300)
                row_dim.scatter_reduce_(0, tmap.row[tok] * D + dim, rq, "amax")
                by_head.scatter_reduce_(0, hd, rq, "amax")
                by_block.scatter_reduce_(0, tmap.gblock[tok] // bucket, rq, "amax")
    counts = hist.tolist()
    res_ulp: dict[str, Any] = {
        "pct_correctly_rounded": 100.0 * n_cr / n_fin if n_fin else 100.0,
        "pct_faithful": 100.0 * n_faith / n_fin if n_fin else 100.0,
        "quantiles": _quantiles([n_exact + counts[0], *counts[1:]], n_fin,
                                worst_u if n_fin else 0.0),
        "hist": {"log2_lo": HIST_LO, "log2_step": HIST_STEP, "counts": counts,
                 "exact": n_exact, "nonfinite": n_bad},
        "worst": None,
        "not_tiny": {"rel": NOT_TINY, "n": n_big,
                     "pct_correctly_rounded": 100.0 * n_big_cr / n_big if n_big else 100.0,
                     "max": worst_big if math.isfinite(worst_big) else None},
    }
    if n_bad:
        res_ulp["quantiles"]["max"] = None
    if worst_u_at >= 0 and n_fin:
        w = _coords(worst_u_at, shape, tmap)
        yv = float(y_all[worst_u_at])
        w.update(value=yv if math.isfinite(yv) else repr(yv), oracle=float(r_all[worst_u_at]),
                 ulp=worst_u if math.isfinite(worst_u) else None)
        res_ulp["worst"] = w
    res: dict[str, Any] = {"ulp": res_ulp, "bound": None}
    if b_all is not None:
        rb: dict[str, Any] = {
            "violations": n_viol,
            "pct_violations": 100.0 * n_viol / n_fin if n_fin else 0.0,
            "max_ratio": worst_r if math.isfinite(worst_r) and worst_r >= 0 else
            (0.0 if worst_r < 0 else None),
            "growth": growth if math.isfinite(growth) else None,
            "worst": None,
            "loc": None,
        }
        if worst_r_at >= 0 and n_fin:
            w = _coords(worst_r_at, shape, tmap)
            r0 = float(r_all[worst_r_at])
            yv = float(y_all[worst_r_at])
            cE0 = c * float(b_all[worst_r_at])
            bd = float(store_bound(torch.tensor([r0], dtype=torch.float64),
                                   torch.tensor([cE0], dtype=torch.float64), dtype_name)[0])
            w.update(value=yv if math.isfinite(yv) else repr(yv), oracle=r0,
                     err=abs(yv - r0) if math.isfinite(yv) else None,
                     bound=bd if math.isfinite(bd) else None)  # inf: r + cE overflows
            rb["worst"] = w
        if n_viol and is3:
            rb["loc"] = {
                "row_dim": [[round(float(x), 4) for x in row]
                            for row in row_dim.view(tmap.block_size, D).tolist()],
                "by_head": [round(float(x), 4) for x in by_head.tolist()],
                "by_block": [round(float(x), 4) for x in by_block.tolist()],
                "block_bucket": bucket,
            }
        res["bound"] = rb
    return res
