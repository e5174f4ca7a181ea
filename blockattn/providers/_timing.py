"""How a provider is timed: `Timing` entries of the bench, each turning a bench case into
`Prepared` timed callables for fwd, bwd and fwd+bwd (`blockattn bench`, `blockattn audit`).

A provider's timings come with the provider itself (one definition, judged and timed): built-in
modules declare `TIMINGS`; an outside kernel is timed through its attention callable
(`kernel_timings`). `prepare(case)` returns `Prepared`:
- `fwd()` -> O: the forward kernels alone (no autograd graph).
- `bwd()` -> (dQ, dK, dV): the backward kernels alone on inputs precomputed once (saved O/lse,
  rotated copies, ...), so the timing excludes autograd bookkeeping. Providers without a
  standalone backward replay `autograd.grad` on a retained graph.
- `fwdbwd()`: forward + backward through autograd, as a training step would run it.
It raises `Unsupported(reason)` when the provider cannot run here; the reason is recorded.

The bench case (`blockattn.bench.case.BenchCase`) is duck-typed here: q, k, v, do, offsets,
offsets_cpu, sinu, scale, T, H, D, dtype, max_len.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from blockattn.providers._base import Unsupported
from blockattn.providers._common import BLOCK


@dataclass
class Prepared:
    fwd: Callable[[], Tensor]
    bwd: Callable[[], tuple[Tensor, Tensor, Tensor]]
    fwdbwd: Callable[[], Any]
    rotary: bool
    notes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Timing:
    """One bench entry of a provider: its name in the bench's rows, whether rotary is applied
    (fused, or outside the kernel), and how to prepare its timed callables for a case."""

    name: str
    rotary: bool
    prepare: Callable[[Any], Prepared]
    description: str
    # Set on the isolated judge's proxy entries: the worker that times it and the provider
    # hosted there (`blockattn.bench.isolated`); `prepare` is then never called here.
    worker: Any = None
    provider: str | None = None


def grad_leaves(case: Any) -> tuple[Tensor, Tensor, Tensor]:
    return tuple(t.detach().requires_grad_(True) for t in (case.q, case.k, case.v))  # type: ignore[return-value]


def grad_fn(o: Tensor, leaves: tuple[Tensor, ...], do: Tensor, retain: bool) -> Callable:
    return lambda: torch.autograd.grad(o, leaves, do, retain_graph=retain)


def replayed(case: Any, attn: Callable[..., Tensor], lv: tuple[Tensor, ...], o_graph: Tensor,
             notes: dict[str, str], rotary: bool = False,
             fwd: Callable[[], Tensor] | None = None) -> Prepared:
    """Timed callables of an attention without a standalone backward: fwd calls it on the case
    (or `fwd`), bwd replays `autograd.grad` on the retained graph `o_graph` of the leaves `lv`,
    fwdbwd runs both through autograd."""

    def fwdbwd() -> Any:
        return torch.autograd.grad(attn(*lv), lv, case.do)

    return Prepared(
        fwd=fwd or (lambda: attn(case.q, case.k, case.v)),
        bwd=grad_fn(o_graph, lv, case.do, retain=True),
        fwdbwd=fwdbwd,
        rotary=rotary,
        notes=notes,
    )


def arch() -> str:
    if not torch.cuda.is_available():
        return "cpu"
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def _spec_of(case: Any, rotary: bool) -> Any:
    """What `Supports.refusal` reads of a case, for a bench case."""
    dtype = str(case.dtype).removeprefix("torch.")
    return SimpleNamespace(variant="rotary" if rotary else "plain", dtype=dtype, D=case.D,
                           H=case.H, kvheads=None, rotate_v=True)  # fmt: skip


def kernel_timing(prov: Any, rotary: bool) -> Timing:
    """Bench entry of a provider with a kernel callable (an outside kernel, `--provider`): the
    same object the correctness suite judges is timed, no second definition.

    fwd: the callable without autograd; bwd: `autograd.grad` replayed on a retained graph (the
    kernel's own backward, plus autograd's bookkeeping, as for eager/flex); fwdbwd: both.
    """
    fn = prov.kernel
    if fn is None:
        raise ValueError(f"provider {prov.name!r} has no kernel callable to time")

    def prepare(case: Any) -> Prepared:
        why = prov.supports.refusal(_spec_of(case, rotary), case.q.device.type, arch())
        if why is not None:
            raise Unsupported(f"{prov.name}: {why}")
        sinu = case.sinu if rotary else None  # FP32 [sin | cos], as the suite passes it

        # A kernel that declares `max_seq_len` gets it, as the built-in entries do: its calls
        # then need no host sync to size their grid.
        msl = {"max_seq_len": case.max_len} if prov.supports.max_seq_len else {}

        def call(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            return fn(q, k, v, case.offsets, block_size=BLOCK, scale=case.scale, sinu_pos=sinu,
                      rotate_v=True, **msl)  # fmt: skip

        lv = grad_leaves(case)
        o_graph = call(*lv)

        def fwd() -> Tensor:
            with torch.no_grad():
                return call(case.q, case.k, case.v)

        notes = {"origin": prov.origin, "bwd": "autograd.grad on a retained graph"}
        return replayed(case, call, lv, o_graph, notes, rotary, fwd)

    name = f"{prov.name}_rotary" if rotary else prov.name
    return Timing(name, rotary, prepare, f"outside kernel {prov.origin}")


def kernel_timings(prov: Any) -> tuple[Timing, ...]:
    """The plain and (when it declares rotary) fused-rotary bench entries of a kernel callable."""
    return (kernel_timing(prov, False),
            *((kernel_timing(prov, True),) if prov.supports.rotary else ()))  # fmt: skip
