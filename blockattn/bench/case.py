"""Benchmark inputs: one jagged case built directly on the device, plus the FP64 sample check.

`blockattn.cases.make_case` draws every value on the CPU (bit-identical across devices), which
costs seconds at the production shape (~1.4 M tokens x 4 x 128 x 4 tensors). Here only the
lengths are drawn on the CPU; values are drawn on the device from a seeded device generator.

Two sparsity conventions, named in every case and result (`sparsity_convention`):
- "empty" (ours, `cases.draw_lengths`): sparsity = expected EMPTY fraction of the padded
  B x max_len grid, mean length (1 - s) max_len. Shape P (s = 0.7): mean 1229, T ~ 1.42 M.
- "fill" (tritonbench's blocked_attention generator, `draw_lengths_fill`): the same number is
  the FILLED fraction, mean length ~ s max_len. Shape P (s = 0.7): mean ~2866, T ~ 3.30 M.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from blockattn.cases.generate import draw_lengths, make_sinu_pos, offsets_from_lengths

BLOCK = 64
SPARSITY_CONVENTIONS = ("empty", "fill")

# Check bounds: relative Frobenius error ||x - ref|| / ||ref|| over the sampled sequences must be
# <= C * u, u = eps(dtype) / 2 the unit roundoff (bf16: 2^-8). O carries one final rounding plus
# the rounded operands (rotated q/k/v, P) of the unfused baselines; the gradients go through more
# roundings and the dS = P * (dP - Di) cancellation, hence the larger constant. A layout or
# masking bug gives errors of order 1, far above either bound.
CHECK_C = {"O": 8.0, "dQ": 16.0, "dK": 16.0, "dV": 16.0}
GATED = ("O", "dQ")  # the spec gates on these; dK/dV are recorded too


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def check_bound(name: str, dtype: torch.dtype) -> float:
    return CHECK_C[name] * unit_roundoff(dtype)


def draw_lengths_fill(B: int, max_len: int, fill: float, generator: torch.Generator) -> Tensor:
    """B lengths under tritonbench's fill-fraction convention (mean length ~ fill * max_len).

    Follows `generate_sparse_lengths` in meta-pytorch/tritonbench,
    tritonbench/operators/blocked_attention/generate_inputs.py (read at commits c93fef4 and
    8d44ad3; there the argument is called `sparsity` but is the fill fraction s):
    - s = 0: all lengths 0; s = 1: all lengths max_len;
    - 0.5 <= s < 1: uniform integers in [int((2s - 1) max_len), max_len), upper end EXCLUSIVE
      (torch.randint), so the mean is (int((2s - 1) max_len) + max_len - 1) / 2 ~ s max_len - 1/2;
    - 0 < s < 0.5: uniform integers in [0, int(2 s max_len)).
    tritonbench draws on the device with the global RNG; here the draw is on the CPU from
    `generator`, so lengths are reproducible per seed (the same distribution, not its values).
    """
    if not 0.0 <= fill <= 1.0:
        raise ValueError(f"fill fraction must be in [0, 1], got {fill}")
    if fill == 0.0:
        return torch.zeros(B, dtype=torch.int64)
    if fill == 1.0:
        return torch.full((B,), max_len, dtype=torch.int64)
    low, high = (
        (int((2 * fill - 1.0) * max_len), max_len) if fill >= 0.5 else (0, int(2 * fill * max_len))
    )
    if high <= low:  # tiny fill at a tiny max_len: randint needs a non-empty range
        return torch.full((B,), low, dtype=torch.int64)
    return torch.randint(low, high, (B,), generator=generator, dtype=torch.int64)


def draw_bench_lengths(
    B: int, max_len: int, sparsity: float, convention: str, generator: torch.Generator
) -> Tensor:
    """Lengths for `sparsity` read under `convention` ("empty" or "fill", see the docstring)."""
    if convention == "empty":
        return draw_lengths(B, max_len, sparsity, generator)
    if convention == "fill":
        return draw_lengths_fill(B, max_len, sparsity, generator)
    raise ValueError(
        f"sparsity_convention must be one of {SPARSITY_CONVENTIONS}, got {convention!r}"
    )


@dataclass
class BenchCase:
    name: str
    B: int
    max_len: int
    sparsity: float
    H: int
    D: int
    dtype: torch.dtype
    q: Tensor
    k: Tensor
    v: Tensor
    do: Tensor
    offsets: Tensor  # (B+1,) int32 on the device
    offsets_cpu: Tensor
    sinu: Tensor  # (T, D) fp32 [sin | cos]
    scale: float
    seed: int
    sparsity_convention: str = "empty"  # how `sparsity` was read: "empty" or "fill"
    _oracle: dict[bool, dict[str, Tensor]] = field(default_factory=dict, repr=False)
    _sample: Tensor | None = field(default=None, repr=False)
    _sample_offsets: Tensor | None = field(default=None, repr=False)

    @property
    def T(self) -> int:
        return self.q.shape[0]

    @property
    def n_blocks(self) -> int:
        lens = self.offsets_cpu[1:] - self.offsets_cpu[:-1]
        return int(((lens + BLOCK - 1) // BLOCK).sum())

    def tensor_bytes(self) -> int:
        """Bytes of one (T, H, D) tensor pass."""
        return self.T * self.H * self.D * self.q.element_size()

    def sinu_bytes(self) -> int:
        return self.sinu.numel() * self.sinu.element_size()

    def describe(self) -> dict[str, Any]:
        return {
            "case": self.name,
            "B": self.B,
            "max_len": self.max_len,
            "sparsity": self.sparsity,
            "sparsity_convention": self.sparsity_convention,
            # Realised filled fraction of the B x max_len grid: comparable across conventions.
            "fill": self.T / (self.B * self.max_len),
            "H": self.H,
            "D": self.D,
            "dtype": str(self.dtype).removeprefix("torch."),
            "T": self.T,
            "n_blocks": self.n_blocks,
            "seed": self.seed,
        }

    # ------------------------------------------------------------------ FP64 sample check

    def sample(self, n_seqs: int) -> tuple[Tensor, Tensor]:
        """Token indices and offsets of up to `n_seqs` random non-empty sequences.

        Attention is local to a sequence's blocks, so a provider's output on these tokens must
        equal the oracle run on the sub-case made of these sequences alone.
        """
        if self._sample is None:
            off = self.offsets_cpu.to(torch.int64)
            lens = off[1:] - off[:-1]
            nz = torch.nonzero(lens > 0).flatten()
            g = torch.Generator().manual_seed(self.seed + 1)
            pick = nz[torch.randperm(nz.numel(), generator=g)[:n_seqs]].sort().values
            idx = torch.cat([torch.arange(int(off[b]), int(off[b + 1])) for b in pick.tolist()])
            self._sample = idx.to(self.q.device)
            self._sample_offsets = offsets_from_lengths(lens[pick]).to(self.q.device)
        assert self._sample_offsets is not None
        return self._sample, self._sample_offsets

    def oracle(self, rotary: bool, n_seqs: int) -> dict[str, Tensor]:
        """FP64 O, dQ, dK, dV on the sampled tokens (cached per rotary flag)."""
        if rotary not in self._oracle:
            import oracles

            idx, off = self.sample(n_seqs)
            q, k, v, do = (t.index_select(0, idx) for t in (self.q, self.k, self.v, self.do))
            if rotary:
                s = self.sinu.index_select(0, idx)
                o = oracles.rotary_block_attention(q, k, v, off, s, scale=self.scale)
                g = oracles.rotary_block_attention_backward(q, k, v, off, s, do, scale=self.scale)
            else:
                o = oracles.block_attention(q, k, v, off, scale=self.scale)
                g = oracles.block_attention_backward(q, k, v, off, do, scale=self.scale)
            self._oracle[rotary] = {"O": o, "dQ": g[0], "dK": g[1], "dV": g[2]}
        return self._oracle[rotary]

    def check(self, outs: dict[str, Tensor], rotary: bool, n_seqs: int) -> dict[str, Any]:
        """Relative errors vs the oracle on the sampled sequences, with bounds and a verdict."""
        ref = self.oracle(rotary, n_seqs)
        idx, _ = self.sample(n_seqs)
        res: dict[str, Any] = {"n_check_tokens": int(idx.numel())}
        ok = True
        for name, r in ref.items():
            if name not in outs:
                continue
            x = outs[name].index_select(0, idx).to(torch.float64)
            denom = float(torch.linalg.vector_norm(r))
            err = float(torch.linalg.vector_norm(x - r)) / max(denom, 1e-300)
            bound = check_bound(name, self.dtype)
            res[f"relerr_{name}"] = err
            res[f"bound_{name}"] = bound
            if name in GATED and not (math.isfinite(err) and err <= bound):
                ok = False
        res["check"] = "pass" if ok else "fail"
        return res

    def free_oracle(self) -> None:
        self._oracle.clear()


def make_bench_case(
    name: str,
    *,
    B: int,
    max_len: int,
    sparsity: float,
    H: int,
    D: int,
    dtype: torch.dtype,
    device: torch.device,
    seed: int = 0,
    sparsity_convention: str = "empty",
    data_seed: int | None = None,
) -> BenchCase:
    """A bench case: lengths drawn from `seed`, data from `data_seed` (default derived from
    `seed`); another data_seed gives another input set of the same shapes."""
    g_len = torch.Generator().manual_seed(seed)
    lens = draw_bench_lengths(B, max_len, sparsity, sparsity_convention, g_len)
    if int(lens.sum()) == 0:
        lens[0] = 1
    offsets_cpu = offsets_from_lengths(lens, torch.int32)
    T = int(offsets_cpu[-1])
    g = torch.Generator(device=device).manual_seed(seed + 12345 if data_seed is None else data_seed)
    # Random normal data (never zeros: zeros would make memory traffic compressible on some
    # parts and hide masking bugs in the check).
    q, k, v, do = (
        torch.randn((T, H, D), generator=g, device=device, dtype=torch.float32).to(dtype)
        for _ in range(4)
    )
    offsets = offsets_cpu.to(device)
    sinu = make_sinu_pos(offsets, D, dtype=torch.float32)
    return BenchCase(
        name=name,
        B=B,
        max_len=max_len,
        sparsity=sparsity,
        H=H,
        D=D,
        dtype=dtype,
        q=q,
        k=k,
        v=v,
        do=do,
        offsets=offsets,
        offsets_cpu=offsets_cpu,
        sinu=sinu,
        scale=1.0 / math.sqrt(D),
        seed=seed,
        sparsity_convention=sparsity_convention,
    )
