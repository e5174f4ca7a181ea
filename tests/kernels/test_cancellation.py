"""Backward cancellation in dS = P * (dP - Di): the centred path against the old one.

dP_ij and Di are large and nearly equal when V's rows nearly agree ("near_constant": one shared
vector per head plus 1e-3 noise) or when the softmax is saturated ("scaled_logits"), and their
fp32 rounding then dominated dP - Di. The kernel now forms dP from V minus one row vector per
block and sums Di in two passes (both exact identities), and in fp16 splits dS at a power-of-two
scale (`blockattn.kernels.attention._bwd_tile`, CENTRED). `attention_bwd(..., centred=False)`
still runs the old numerics, so each case below checks both: the centred path must meet the
bounds, and the old path must break at least one of them (else the case tests nothing).

Two measures per tensor, against the FP64 oracles:
- ratio: max |err| / max |round(ref) - ref|, as in test_attention.py;
- off: % of elements more than one ulp (of the output dtype, at the element's own magnitude)
  from the oracle, among those with |ref| >= 2^-20 max |ref| (smaller ones lie below what any
  fp32 pipeline resolves at the tensor's scale). The max-error ratio cannot see a saturated
  softmax: its errors sit in the small gradients of saturated rows, far below the largest.

"Rotary" is rotate_v=False for near_constant (a rotated V is not near-constant any more, so the
old path was already at the floor there) and rotate_v=True for scaled_logits (exercising the
centring of the rotated fp32 V before its hi/lo split).
"""

from __future__ import annotations

import math

import pytest
import torch

import oracles
from blockattn.cases.generate import make_case
from blockattn.kernels.dispatch import attention_bwd
from blockattn.kernels.tiles import build_tile_table

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
MANT_BITS = {torch.bfloat16: 7, torch.float16: 10}  # stored significand bits
SMALL = 2.0**-20  # elements below SMALL * max |ref| are left out of `off`

RATIO_BOUND = 1.25
OFF_BOUND = 1.0  # %, unless listed here:
OFF_BOUNDS = {
    # bf16 near_constant dQ keeps a second cancellation this change does not address: dQ = dS K
    # with K near-constant too, so dQ_i = sum_j dS_ij (K_j - K_0) cancels inside the dS K MMA
    # (whose hi/lo dS carries 16 bits). Its max error is at the floor, its small elements not.
    ("bf16", "near_constant", "dQ"): 20.0,
    # The old path's bf16 near_constant dK is off in 0.6-0.7% of elements: a tighter bound.
    ("bf16", "near_constant", "dK"): 0.25,
}

# Measured on CPU (interpreter) with these exact cases, old -> new (ratio; off %):
#   bf16 plain  near_constant  dQ 28.6 -> 1.00; 85.5 -> 12.4    dK 1.00 -> 1.00; 0.63 -> 0.045
#   bf16 rotary near_constant  dQ 1.00 -> 1.00; 27.3 -> 4.78    dK 1.00 -> 1.00; 0.72 -> 0.081
#   bf16 plain  scaled_logits  dQ 1.00 -> 1.00; 4.09 -> 0.008   dK 1.00 -> 1.00; 2.02 -> 0.006
#   bf16 rotary scaled_logits  dQ 1.00 -> 1.00; 3.77 -> 0.135   dK 1.00 -> 1.00; 1.67 -> 0.506
#   fp16 plain  near_constant  dQ 21.0 -> 1.00; 16.4 -> 0       dK 1.09 -> 1.00; 2.71 -> 0
#   fp16 rotary near_constant  dQ 1.71 -> 1.00; 13.7 -> 0       dK 1.00 -> 1.00; 2.93 -> 0
#   fp16 plain  scaled_logits  dQ 1.00 -> 1.00; 12.7 -> 0.048   dK 1.00 -> 1.00; 5.13 -> 0.101
#   fp16 rotary scaled_logits  dQ 1.00 -> 1.00; 10.8 -> 0.085   dK 1.00 -> 1.00; 4.14 -> 0.137
# (Seeds 2 and 3 gave the same picture; on an H100 the old path's bf16/fp16 plain near_constant
# dQ was 71x / 58x the floor on a larger case, the centred path 1.00x.)
CASES = [
    (dt, variant, dist)
    for dt in DTYPES
    for variant in ("plain", "rotary")
    for dist in ("near_constant", "scaled_logits")
]


def _off_bound(dt: str, dist: str, name: str) -> float:
    return OFF_BOUNDS.get((dt, dist, name), OFF_BOUND)


def _measures(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    got64, ref = got.detach().double().cpu(), ref.cpu()
    assert torch.isfinite(got64).all()
    err = (got64 - ref).abs()
    floor = (ref.to(got.dtype).double() - ref).abs().max().item()
    ratio = err.max().item() / max(floor, 1e-300)
    fi = torch.finfo(got.dtype)
    exp = torch.floor(torch.log2(ref.abs().clamp(min=fi.tiny)))
    ulp = torch.exp2(exp - MANT_BITS[got.dtype])
    counted = ref.abs() >= SMALL * ref.abs().max()
    off = 100.0 * float(((err > ulp) & counted).sum()) / max(int(counted.sum()), 1)
    return ratio, off


def _case(dt: str, variant: str, dist: str):
    rotary = variant == "rotary"
    rotate_v = rotary and dist == "scaled_logits"
    # Three sequences (T = 242 at seed 1): full and partial blocks, two heads.
    c = make_case(B=3, max_len=160, sparsity=0.3, H=2, D=64, dtype=DTYPES[dt], seed=1,
                  distribution=dist)
    q, k, v, do = (t.to(DEVICE) for t in (c.q, c.k, c.v, c.grad_out))
    off = c.offsets.to(DEVICE)
    sinu = c.sinu_pos.to(DEVICE) if rotary else None
    table = build_tile_table(off, q.shape[0], 64)

    def run(centred: bool) -> tuple[torch.Tensor, torch.Tensor]:
        dq, dk, _ = attention_bwd(q, k, v, do, table, sinu, 1 / math.sqrt(64), 64, rotate_v,
                                  centred=centred)
        return dq, dk

    args = (c.q, c.k, c.v, c.offsets)
    if rotary:
        ref = oracles.rotary_block_attention_backward(*args, c.sinu_pos, c.grad_out,
                                                      rotate_v=rotate_v)
    else:
        ref = oracles.block_attention_backward(*args, c.grad_out)
    return run, ref[:2]


@pytest.mark.parametrize(("dt", "variant", "dist"), CASES, ids=["-".join(c) for c in CASES])
def test_centred_path_meets_bounds_the_old_path_breaks(dt: str, variant: str, dist: str) -> None:
    run, ref = _case(dt, variant, dist)
    new = dict(zip(("dQ", "dK"), (_measures(g, r) for g, r in zip(run(True), ref, strict=True)),
                   strict=True))
    old = dict(zip(("dQ", "dK"), (_measures(g, r) for g, r in zip(run(False), ref, strict=True)),
                   strict=True))
    for name, (ratio, off) in new.items():
        assert ratio <= RATIO_BOUND, f"{name}: {ratio:.3f}x the rounding floor (old: {old[name]})"
        bound = _off_bound(dt, dist, name)
        assert off <= bound, f"{name}: {off:.3f}% of elements > 1 ulp off (old: {old[name]})"
    broken = [
        name
        for name, (ratio, off) in old.items()
        if ratio > RATIO_BOUND or off > _off_bound(dt, dist, name)
    ]
    # dQ always breaks it; the old dK did on CPU but stayed inside on an H100 for two of these
    # cases (bf16 rotary near_constant: ratio 1.0, 0.78 % and 0.46 % of elements > 1 ulp off).
    assert "dQ" in broken, f"old path meets a bound it should break: {old}"


@pytest.mark.parametrize("dt", list(DTYPES))
def test_centred_path_is_deterministic_and_single_token_blocks_give_zero(dt: str) -> None:
    """Blocks of one token: P = 1, so dS = 0 exactly and dQ = dK = 0; in fp16 the dS split's
    power-of-two scale then meets max |dS| = 0 and must stay finite (its clamp). A second
    launch must give the same bits."""
    c = make_case(lengths=[1, 1, 1, 1], H=2, D=64, dtype=DTYPES[dt], seed=5)
    q, k, v, do = (t.to(DEVICE) for t in (c.q, c.k, c.v, c.grad_out))
    table = build_tile_table(c.offsets.to(DEVICE), q.shape[0], 64)
    first = attention_bwd(q, k, v, do, table, None, 0.125, 64, True)
    again = attention_bwd(q, k, v, do, table, None, 0.125, 64, True)
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)
    dq, dk, dv = first
    assert torch.count_nonzero(dq) == 0 and torch.count_nonzero(dk) == 0
    assert torch.equal(dv, do)  # dV = P^T dO with P = 1
