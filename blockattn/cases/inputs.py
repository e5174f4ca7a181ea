"""Build the tensors of a CaseSpec (via blockattn.cases.make_case, plus projection inputs)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from blockattn.cases.spec import PROJ_IN, CaseSpec


@dataclass
class Inputs:
    spec: CaseSpec
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    grad_out: torch.Tensor
    offsets: torch.Tensor
    sinu_pos: torch.Tensor
    # projection variant only
    x: torch.Tensor | None = None
    w: torch.Tensor | None = None
    bias: torch.Tensor | None = None

    @property
    def T(self) -> int:
        return int(self.q.shape[0])

    @property
    def max_seq_len(self) -> int | None:
        """The `max_seq_len=` argument the spec asks for (None: omitted)."""
        lengths = (self.offsets[1:] - self.offsets[:-1]).tolist()
        return self.spec.max_seq_len_value(lengths)

    @property
    def qheads(self) -> int:
        return self.spec.H

    @property
    def kvheads(self) -> int:
        return self.spec.kvheads or self.spec.H


def build_inputs(spec: CaseSpec, device: str | torch.device = "cpu") -> Inputs:
    from blockattn.cases.generate import make_case  # lazy: owned elsewhere, may land later

    kw = dict(
        H=spec.H,
        D=spec.D,
        dtype=spec.torch_dtype,
        device=str(device),
        seed=spec.seed,
        distribution=spec.distribution,
    )
    if spec.lengths is not None:
        case = make_case(lengths=list(spec.lengths), **kw)
    else:
        case = make_case(B=spec.B, max_len=spec.max_len, sparsity=spec.sparsity, **kw)
    inp = Inputs(
        spec=spec,
        q=case.q,
        k=case.k,
        v=case.v,
        grad_out=case.grad_out,
        offsets=case.offsets.to(getattr(torch, spec.offsets_dtype)),
        sinu_pos=case.sinu_pos,
    )
    if spec.variant == "projection":
        # Seeded from the case seed (offset so x is not a copy of q's stream). w ~ N(0, 1/PROJ_IN)
        # keeps q/k/v at unit scale, like the other cases; bias small but nonzero so dbias is real.
        g = torch.Generator(device="cpu").manual_seed(spec.seed * 7919 + 17)
        T, dt = inp.T, spec.torch_dtype
        n_out = (spec.H + 2 * inp.kvheads) * spec.D
        x = torch.randn(T, PROJ_IN, generator=g)
        w = torch.randn(PROJ_IN, n_out, generator=g) / PROJ_IN**0.5
        bias = 0.1 * torch.randn(n_out, generator=g)
        inp.x, inp.w, inp.bias = (t.to(device=device, dtype=dt) for t in (x, w, bias))
    return inp
