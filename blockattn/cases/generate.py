"""Seeded generator of jagged attention test cases.

Imports torch only (no kernels): the cases feed both the kernels and the FP64 oracles.

Everything is drawn on the CPU from one `torch.Generator` (float32 draws, then cast to the
requested dtype on the CPU) and only then moved to the device, so the same seed gives a
bit-identical case on any device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from blockattn.names import DISTRIBUTIONS

# "scaled_logits": q and k are multiplied by this, so scores have std ~SCALED_LOGITS**2 = 64
# (with the default 1/sqrt(D) scale) and the softmax is saturated (one key takes ~all mass).
SCALED_LOGITS = 8.0
# "heavy_tailed": Student-t with this many degrees of freedom (finite variance, heavy tails:
# P(|t| > 5) ~ 1.5% versus 5.7e-7 for N(0, 1)).
HEAVY_TAILED_DOF = 3
# "tiny": magnitudes ~1e-3 (still normal numbers in bf16/fp16).
TINY = 1e-3
# "near_constant": every token is one shared per-head vector plus noise of this size, so all
# scores of a row are nearly equal and the softmax is ~uniform.
NEAR_CONSTANT_NOISE = 1e-3
# "negative_rows": this fraction of query rows get strongly negative scores (~-400) against
# every key (tests max-subtraction: a naive exp underflows to 0/0).
NEGATIVE_ROW_FRACTION = 0.25
# Seed offset of the value stream (any constant distinct from 0 works).
_VALUE_STREAM = 0x5DEECE66D


@dataclass
class Case:
    """One jagged case. `params` is everything `make_case` needs to regenerate it."""

    q: Tensor
    k: Tensor
    v: Tensor
    grad_out: Tensor
    offsets: Tensor
    sinu_pos: Tensor
    params: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        p = self.params
        dt = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}.get(
            p["dtype"], p["dtype"]
        )
        return (
            f"{p['distribution']}-B{p['B']}-T{int(self.offsets[-1])}-H{p['H']}-D{p['D']}"
            f"-{dt}-seed{p['seed']}"
        )

    def regenerate(self, device: str | torch.device | None = None) -> Case:
        """Rebuild this case from `params` (optionally on another device)."""
        return make_case_from_params(self.params, device=device)


def offsets_from_lengths(lengths: list[int] | Tensor, dtype: torch.dtype = torch.int32) -> Tensor:
    """(B,) lengths -> (B+1,) offsets with offsets[0] = 0 (CPU tensor)."""
    if dtype not in (torch.int32, torch.int64):
        raise TypeError(f"dtype must be torch.int32 or torch.int64, got {dtype}")
    lens = torch.as_tensor(lengths, dtype=torch.int64).reshape(-1).cpu()
    if bool((lens < 0).any()):
        raise ValueError("lengths must be non-negative")
    return torch.cat((torch.zeros(1, dtype=torch.int64), torch.cumsum(lens, 0))).to(dtype)


def lengths_from_offsets(offsets: Tensor) -> Tensor:
    """(B+1,) offsets -> (B,) int64 lengths (on the offsets' device)."""
    return (offsets[1:] - offsets[:-1]).to(torch.int64)


def draw_lengths(B: int, max_len: int, sparsity: float, generator: torch.Generator) -> Tensor:
    """B sequence lengths in [0, max_len] whose mean is (1 - sparsity) * max_len in expectation.

    `sparsity` is the expected EMPTY fraction of the padded B x max_len grid. (Note that
    generative-recommenders uses the opposite "fill" convention: there sparsity is the fraction
    of the grid that IS filled.)

    Distribution: with m = (1 - sparsity) * max_len and half-width h = min(m, max_len - m),
    u ~ Uniform[m - h, m + h] (symmetric about m and inside [0, max_len]); the length is u
    stochastically rounded, floor(u + r) with r ~ Uniform[0, 1), so E[length] = m exactly and
    Var[length] <= h^2 / 3 + 1/4. For sparsity 0.7, max_len 4096: mean 1228.8, range [0, 2458].
    """
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")
    m = (1.0 - sparsity) * max_len
    h = min(m, max_len - m)
    u = m - h + 2.0 * h * torch.rand(B, generator=generator, dtype=torch.float64)
    r = torch.rand(B, generator=generator, dtype=torch.float64)
    return torch.floor(u + r).clamp_(0, max_len).to(torch.int64)


def length_std_bound(max_len: int, sparsity: float) -> float:
    """Upper bound on the std of one drawn length: sqrt(h^2/3 + 1/4) (see draw_lengths)."""
    m = (1.0 - sparsity) * max_len
    h = min(m, max_len - m)
    return math.sqrt(h * h / 3.0 + 0.25)


def make_sinu_pos(
    offsets: Tensor, D: int, *, theta: float = 10000.0, dtype: torch.dtype = torch.float32
) -> Tensor:
    """(T, D) rotary table in the production layout [sin (D/2) | cos (D/2)].

    Position = index of the token within its own sequence; angle_i = pos * theta^(-2i/D).
    Computed in float64 then cast, on the offsets' device; vectorised.
    """
    if D % 2 != 0:
        raise ValueError(f"D must be even, got {D}")
    lengths = lengths_from_offsets(offsets)
    T = int(offsets[-1])
    seq = torch.repeat_interleave(torch.arange(lengths.numel(), device=offsets.device), lengths)
    pos = torch.arange(T, device=offsets.device) - offsets[:-1].to(torch.int64)[seq]
    i = torch.arange(D // 2, device=offsets.device, dtype=torch.float64)
    inv_freq = theta ** (-2.0 * i / D)
    angle = pos.to(torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat((torch.sin(angle), torch.cos(angle)), dim=1).to(dtype)


def _randn(shape: tuple[int, ...], g: torch.Generator) -> Tensor:
    return torch.randn(shape, generator=g, dtype=torch.float32)


def _draw_qkv(
    distribution: str, T: int, H: int, D: int, g: torch.Generator
) -> tuple[Tensor, Tensor, Tensor]:
    shape = (T, H, D)
    if distribution == "normal":
        return _randn(shape, g), _randn(shape, g), _randn(shape, g)
    if distribution == "scaled_logits":
        return SCALED_LOGITS * _randn(shape, g), SCALED_LOGITS * _randn(shape, g), _randn(shape, g)
    if distribution == "heavy_tailed":
        # Student-t = z / sqrt(chi2_nu / nu), chi2_nu a sum of nu squared normals (seeded; the
        # torch.distributions samplers take no generator).
        def t(shape: tuple[int, ...]) -> Tensor:
            z = _randn(shape, g)
            chi2 = _randn((*shape, HEAVY_TAILED_DOF), g).square().sum(-1)
            return z / torch.sqrt(chi2 / HEAVY_TAILED_DOF)

        return t(shape), t(shape), t(shape)
    if distribution == "tiny":
        return TINY * _randn(shape, g), TINY * _randn(shape, g), TINY * _randn(shape, g)
    if distribution == "near_constant":

        def nc() -> Tensor:
            base = _randn((1, H, D), g)
            return base + NEAR_CONSTANT_NOISE * _randn(shape, g)

        return nc(), nc(), nc()
    if distribution == "negative_rows":
        # Keys share a per-head direction mu (|mu| = 8): k = z + mu. Selected query rows are
        # q = -50 * sqrt(D) * mu_hat, so scale * q.k = -50 * (mu_hat.z + 8) ~ -400 +- 50 for
        # every key; other rows are N(0, 1).
        mu = _randn((1, H, D), g)
        mu = 8.0 * mu / mu.norm(dim=-1, keepdim=True)
        k = _randn(shape, g) + mu
        q = _randn(shape, g)
        neg = torch.rand((T, 1, 1), generator=g) < NEGATIVE_ROW_FRACTION
        q = torch.where(neg, (-50.0 * math.sqrt(D) / 8.0) * mu.expand(shape), q)
        return q, k, _randn(shape, g)
    raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")


def make_case(
    *,
    B: int = 4,
    max_len: int = 256,
    sparsity: float = 0.5,
    H: int = 2,
    D: int = 64,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu",
    seed: int = 0,
    distribution: str = "normal",
    lengths: list[int] | None = None,
    sinu_dtype: torch.dtype = torch.float32,
) -> Case:
    """Build a seeded jagged case (q, k, v, grad_out: (T, H, D) `dtype`; offsets int32).

    `lengths` (a list) overrides B/max_len/sparsity. Otherwise lengths come from
    `draw_lengths` (see there: `sparsity` is the expected EMPTY fraction of the padded
    B x max_len grid, mean length (1 - sparsity) * max_len in expectation;
    generative-recommenders uses the opposite "fill" convention). If every drawn length is 0,
    the first is set to 1 so a drawn case is never empty (explicit `lengths` may give T = 0).
    grad_out ~ N(0, 1) for every distribution.
    """
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
    if D % 2 != 0 or D < 2:
        raise ValueError(f"D must be even and >= 2 (rotary pairs), got {D}")
    if H < 1:
        raise ValueError(f"H must be >= 1, got {H}")
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating dtype, got {dtype}")
    # Two streams: lengths and values. Keeping values on their own stream lets
    # make_case_from_params (explicit lengths) reproduce the values bit for bit.
    g_len = torch.Generator(device="cpu").manual_seed(seed)
    g = torch.Generator(device="cpu").manual_seed(seed ^ _VALUE_STREAM)
    if lengths is not None:
        lens = torch.as_tensor(list(lengths), dtype=torch.int64)
        if bool((lens < 0).any()):
            raise ValueError("lengths must be non-negative")
        B = lens.numel()
        max_len = int(lens.max()) if B else 0
    else:
        if B < 1 or max_len < 1:
            raise ValueError(f"B and max_len must be >= 1, got B={B}, max_len={max_len}")
        lens = draw_lengths(B, max_len, sparsity, g_len)
        if int(lens.sum()) == 0:
            lens[0] = 1
    offsets = offsets_from_lengths(lens, torch.int32)
    T = int(offsets[-1])
    q, k, v = _draw_qkv(distribution, T, H, D, g)
    grad_out = _randn((T, H, D), g)
    sinu_pos = make_sinu_pos(offsets, D, dtype=sinu_dtype)
    # Cast on the CPU, then move: identical bits on every device.
    q, k, v, grad_out = (t.to(dtype).to(device) for t in (q, k, v, grad_out))
    params = {
        "seed": seed,
        "B": B,
        "max_len": max_len,
        "sparsity": sparsity,
        "lengths": lens.tolist(),
        "H": H,
        "D": D,
        "dtype": str(dtype).removeprefix("torch."),
        "sinu_dtype": str(sinu_dtype).removeprefix("torch."),
        "distribution": distribution,
        "device": str(torch.device(device)),
    }
    return Case(q, k, v, grad_out, offsets.to(device), sinu_pos.to(device), params)


def make_case_from_params(params: dict[str, Any], device: str | torch.device | None = None) -> Case:
    """Regenerate a case from `Case.params` (lengths are explicit, so B/max_len are implied)."""
    return make_case(
        H=params["H"],
        D=params["D"],
        dtype=getattr(torch, params["dtype"]),
        device=params["device"] if device is None else device,
        seed=params["seed"],
        distribution=params["distribution"],
        lengths=list(params["lengths"]),
        sinu_dtype=getattr(torch, params.get("sinu_dtype", "float32")),
    )
