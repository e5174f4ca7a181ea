"""Projection + fused-rotary attention, backward with the packed gradient vs the unfused one.

Two timed entries on the same inputs (x @ w + bias -> q | k | v -> rotary block attention):
- "projection_packed": `projection_rotary_attention` as shipped: the backward kernel writes dq,
  dk, dv into one packed (T, 3 H D) gradient, then dx = dY @ w^T and dw = x^T @ dY.
- "projection_unfused": `_projection_rotary_attention(packed_grad=False)`: autograd zero-pads
  dq, dk, dv into three projection-sized tensors and sums them before the same two GEMMs.
The forward is the same launch in both, so only "bwd" (autograd.grad replayed on a retained
graph) and "fwdbwd" (a training step) are timed. The check is bitwise equality of O, dx, dw and
dbias between the two: the packed path must not change the numerics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from blockattn.bench.case import BLOCK, BenchCase

ENTRIES: dict[str, bool] = {"projection_packed": True, "projection_unfused": False}
PASSES = ("bwd", "fwdbwd")


@dataclass
class ProjectionInputs:
    x: Tensor  # (T, d_in), d_in = H * D
    w: Tensor  # (d_in, 3 H D), scaled so that q, k, v have unit-order entries
    bias: Tensor  # (3 H D,)
    do: Tensor  # (T, H, D)

    def leaves(self) -> list[Tensor]:
        return [t.detach().requires_grad_(True) for t in (self.x, self.w, self.bias)]


@dataclass
class ProjectionPrepared:
    bwd: Callable[[], Any]
    fwdbwd: Callable[[], Any]
    notes: dict[str, str] = field(default_factory=dict)


def make_inputs(case: BenchCase) -> ProjectionInputs:
    """Seeded random inputs on the case's device (never zeros: see make_bench_case)."""
    d_in, n = case.H * case.D, 3 * case.H * case.D
    dev = case.q.device
    g = torch.Generator(device=dev).manual_seed(case.seed + 4242)

    def randn(*shape: int) -> Tensor:
        return torch.randn(shape, generator=g, device=dev, dtype=torch.float32)

    return ProjectionInputs(
        x=randn(case.T, d_in).to(case.dtype),
        w=(randn(d_in, n) / math.sqrt(d_in)).to(case.dtype),
        bias=randn(n).to(case.dtype),
        do=case.do,
    )


def _forward(case: BenchCase, leaves: list[Tensor], packed: bool) -> Tensor:
    from blockattn.ops import _projection_rotary_attention

    x, w, bias = leaves
    return _projection_rotary_attention(
        x,
        w,
        case.sinu,
        case.offsets,
        qheads=case.H,
        bias=bias,
        block_size=BLOCK,
        scale=case.scale,
        max_seq_len=case.max_len,
        packed_grad=packed,
    )


def run_once(case: BenchCase, inputs: ProjectionInputs, packed: bool) -> tuple[Tensor, ...]:
    """(O, dx, dw, dbias) of one fwd+bwd."""
    leaves = inputs.leaves()
    out = _forward(case, leaves, packed)
    return (out.detach(), *torch.autograd.grad(out, leaves, inputs.do))


def _bits(t: Tensor) -> Tensor:
    # Bit patterns: value equality would pass -0.0 vs +0.0.
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def check_bitwise(case: BenchCase, inputs: ProjectionInputs) -> dict[str, Any]:
    """Packed vs unfused: bit patterns of O, dx, dw, dbias, and all finite."""
    got = run_once(case, inputs, packed=True)
    want = run_once(case, inputs, packed=False)
    bad = []
    for name, a, e in zip(("O", "dx", "dw", "dbias"), got, want, strict=True):
        if not bool(a.isfinite().all()):
            bad.append(f"{name} non-finite")
        elif not torch.equal(_bits(a), _bits(e)):
            bad.append(f"{name} differs (max |diff| {float((a.float() - e.float()).abs().max())})")
    return {
        "check": "fail" if bad else "pass",
        "check_kind": "bitwise packed vs unfused (O, dx, dw, dbias)",
        "mismatch": "; ".join(bad),
    }


def prepare(case: BenchCase, inputs: ProjectionInputs, packed: bool) -> ProjectionPrepared:
    leaves = inputs.leaves()
    out = _forward(case, leaves, packed)  # graph kept for the bwd replay

    def fwdbwd() -> Any:
        fresh = inputs.leaves()
        o = _forward(case, fresh, packed)
        return torch.autograd.grad(o, fresh, inputs.do)

    return ProjectionPrepared(
        bwd=lambda: torch.autograd.grad(out, leaves, inputs.do, retain_graph=True),
        fwdbwd=fwdbwd,
        notes={
            "d_in": str(case.H * case.D),
            "grad": "packed (T, 3HD) dY" if packed else "autograd sum of 3 zero-padded dq/dk/dv",
        },
    )
