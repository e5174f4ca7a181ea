"""Outside kernels: a callable with `block_attention`'s signature becomes a provider.

    fn(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v) -> out   (T, H, D)

q, k, v are leaves that require grad; the suite differentiates `out` with autograd, so the
kernel's backward is judged too. `scale` is always passed as a float (the case's effective
scale, 1/sqrt(D) by default) and `sinu_pos` is None for plain cases, the (T, D) `[sin | cos]`
table for rotary ones (rotary is fused: the kernel applies it to q, k and, if rotate_v, v).
An optional projection callable has `projection_rotary_attention`'s signature:

    proj(x, w, sinu_pos, offsets, *, qheads, kvheads, bias, block_size, scale, rotate_v) -> out

How the kernel is judged (the tolerance file's rules are keyed by provider name, and an outside
kernel is not in them): by the accuracy model it declares (a name in the file's [models]); or,
if it names a `reference` provider instead, by that provider's rule; with neither, by
`fa2-rounded-p-ds`, the precision of every FlashAttention-style kernel (FP32 scores, softmax and
accumulators; P and dS rounded to the input dtype before their GEMMs): never by "no rule". A
kernel that rounds the scores themselves (eager bf16 math) must declare `eager-input-dtype`:
as a default that model is too loose to see a 1 % softmax-scale bug in bf16 (measured,
tests/providers/test_outside_kernels.py). `Tolerances.rule_for` applies this.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from blockattn.providers._base import Provider, Supports, Unsupported

DEFAULT_MODEL = "fa2-rounded-p-ds"


@dataclass(frozen=True)
class Declaration:
    """What `@blockattn.providers.kernel(...)` attaches to a kernel callable."""

    name: str | None = None
    supports: Supports = field(default_factory=Supports)
    accuracy_model: str | None = None
    reference: str | None = None
    projection: Callable | None = None
    description: str = ""


KEYWORDS = ("block_size", "scale", "sinu_pos", "rotate_v")


def signature_problem(fn: Callable, supports: Supports) -> str | None:
    """Why `fn` cannot be called as `fn(q, k, v, offsets, *, block_size, scale, sinu_pos,
    rotate_v[, max_seq_len])` (None: it can, or its signature cannot be read)."""
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # a builtin or C callable: judged by calling it
    kw = {k: None for k in KEYWORDS}
    if supports.max_seq_len:
        kw["max_seq_len"] = None
    try:
        sig.bind(None, None, None, None, **kw)
    except TypeError as exc:
        want = "(q, k, v, offsets, *, " + ", ".join(kw) + ")"
        return (f"{getattr(fn, '__name__', fn)}{sig} cannot be called as {want}: {exc} "
                "(blockattn.block_attention's signature)")  # fmt: skip
    return None


def from_callable(
    fn: Callable, *, name: str | None, origin: str, spec: str | None
) -> Provider:
    decl: Declaration = getattr(fn, "__blockattn__", None) or Declaration()
    if decl.accuracy_model and decl.reference:
        raise ValueError(f"provider {origin}: declare accuracy_model or reference, not both")
    pname = name or decl.name or getattr(fn, "__name__", None) or "kernel"
    supports = decl.supports
    why = signature_problem(fn, supports)
    if why is not None:  # checked once, up front: not once per case
        raise ValueError(f"provider {origin}: {why}")
    if decl.projection is None and supports.projection:
        supports = Supports(**{**supports.__dict__, "projection": False})
    model = decl.accuracy_model or (None if decl.reference else DEFAULT_MODEL)
    return Provider(
        name=pname,
        role="kernel",
        run=_runner(fn, decl.projection, pname),
        accuracy_model=model,
        supports=supports,
        reference=decl.reference,
        origin=origin,
        spec=spec,
        kernel=fn,
        projection=decl.projection,
        description=decl.description or (fn.__doc__ or "").strip().split("\n")[0],
    )


def _check_out(o: Any, like: torch.Tensor, who: str) -> torch.Tensor:
    if not isinstance(o, torch.Tensor):
        raise TypeError(f"{who} returned {type(o).__name__}, expected a Tensor")
    if o.shape != like.shape or o.dtype != like.dtype:
        raise ValueError(f"{who} returned {tuple(o.shape)} {o.dtype}, expected "
                         f"{tuple(like.shape)} {like.dtype}")  # fmt: skip
    if not o.requires_grad:
        raise ValueError(f"{who}: output does not require grad (not differentiable)")
    return o


def _runner(fn: Callable, proj: Callable | None, name: str) -> Callable:
    def run(inputs: Any, variant: str) -> dict[str, torch.Tensor]:
        spec = inputs.spec
        scale = float(spec.effective_scale)
        if variant == "projection":
            if proj is None:
                raise Unsupported(f"{name} declares no projection callable")
            x, w, b = (t.detach().clone().requires_grad_(True)
                       for t in (inputs.x, inputs.w, inputs.bias))  # fmt: skip
            o = proj(x, w, inputs.sinu_pos, inputs.offsets, qheads=inputs.qheads,
                     kvheads=inputs.kvheads, bias=b, block_size=spec.block_size, scale=scale,
                     rotate_v=spec.rotate_v)  # fmt: skip
            o = _check_out(o, inputs.q, name)  # (T, qheads, D) in the case dtype
            dx, dw, db = torch.autograd.grad(o, (x, w, b), inputs.grad_out, allow_unused=True)
            return {"O": o.detach(), "dX": _z(dx, x), "dW": _z(dw, w), "dbias": _z(db, b)}
        q, k, v = (t.detach().clone().requires_grad_(True)
                   for t in (inputs.q, inputs.k, inputs.v))  # fmt: skip
        msl = inputs.max_seq_len  # only on a spec the kernel declared it for (Supports)
        kw = {} if msl is None else {"max_seq_len": msl}
        o = fn(q, k, v, inputs.offsets, block_size=spec.block_size, scale=scale,
               sinu_pos=inputs.sinu_pos if variant == "rotary" else None,
               rotate_v=spec.rotate_v, **kw)  # fmt: skip
        o = _check_out(o, q, name)
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), inputs.grad_out, allow_unused=True)
        return {"O": o.detach(), "dQ": _z(dq, q), "dK": _z(dk, k), "dV": _z(dv, v)}

    return run


def _z(g: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    # An input the output does not depend on has a zero gradient (autograd returns None).
    return torch.zeros_like(like) if g is None else g.detach()
