"""How the kernel under test is called, wherever it runs: a case through its provider's `run`, a
contract probe through its attention callable (forward, then backward through autograd), and what
a returned output must be.

The isolated worker (`blockattn.run.worker`) and the in-process debug mode call through the same
functions, so both judge the same calls. What a kernel returns is checked here by name: an output
must be a dense `torch.Tensor` (not a subclass, not a lazy or nested wrapper) on the inputs'
device; work still running when the call returned shows as outputs that change afterwards.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
from torch import Tensor

KEYS = ("O", "dQ", "dK", "dV")


def declaration(prov: Any) -> dict[str, Any]:
    """What the judge knows of a provider: the same fields in the worker and in the judge."""
    from blockattn.providers import timings_of

    return {
        "name": prov.name, "role": prov.role, "accuracy_model": prov.accuracy_model,
        "reference": prov.reference, "supports": prov.supports.to_dict(), "origin": prov.origin,
        "spec": prov.spec, "description": prov.description, "has_kernel": prov.kernel is not None,
        "has_projection": prov.projection is not None,
        "timings": [{"name": t.name, "rotary": t.rotary, "description": t.description}
                    for t in timings_of(prov)],
    }  # fmt: skip


def call_probe(fn: Any, p: Any) -> dict[str, Tensor]:
    """Forward and backward of `fn` on probe `p` (a `blockattn.cases.contract.Probe`), handing
    the kernel the probe's own views (no clone, no `.contiguous()`)."""
    # detach() keeps the view's strides and storage offset: the kernel gets the probe's own
    # memory layout, as autograd leaves aliasing the probe's buffers.
    leaves = [x.detach().requires_grad_(True) for x in (p.q, p.k, p.v)]
    args, offsets = leaves, p.offsets
    if p.nested:  # differentiable views of the leaves; offsets travel inside the tensors
        args = [torch.nested.nested_tensor_from_jagged(x, p.offsets.to(torch.int64))
                for x in leaves]  # fmt: skip
        offsets = None
    kw = {} if p.max_seq_len is None else {"max_seq_len": p.max_seq_len}
    o = fn(*args, offsets, block_size=p.block_size, scale=p.scale, sinu_pos=p.sinu_pos,
           rotate_v=p.rotate_v, **kw)  # fmt: skip
    if not isinstance(o, Tensor):
        raise TypeError(f"returned {type(o).__name__}, expected a Tensor")
    if p.nested:
        if not o.is_nested:
            raise TypeError("nested input, but the output is not a nested tensor")
        o = o.values()
    elif (why := output_problem(o, p.q, "the output")) is not None:
        raise TypeError(why)
    if o.numel() == 0 or not o.requires_grad:
        grads: list[Tensor | None] = [None, None, None]
        if o.numel() and not o.requires_grad:
            raise ValueError("the output does not require grad (not differentiable)")
    else:
        grads = list(torch.autograd.grad(o, leaves, p.grad_out, allow_unused=True))
    full = [torch.zeros_like(x) if g is None else g for g, x in zip(grads, leaves, strict=True)]
    return {"O": o.detach(), "dQ": full[0], "dK": full[1], "dV": full[2]}


def call_on_side_stream(fn: Any, p: Any) -> dict[str, Tensor]:
    """The streams probe's call: p's buffers hold the clean inputs; they are made stale (NaN,
    offsets zero), then rewritten on a side stream behind a sleep, and the kernel is called on
    that stream with no synchronisation first. A kernel that launches on another stream (or
    reads its inputs before the stream's earlier work is done) sees the stale NaN."""
    src = {n: b.clone() for n, b in p.buffers.items()}
    offs = p.offsets.clone()
    for b in p.buffers.values():
        b.fill_(float("nan"))
    p.offsets.zero_()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    try:
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # ~tens of ms of GPU time before the writes land
            for n, b in p.buffers.items():
                b.copy_(src[n], non_blocking=True)
            p.offsets.copy_(offs, non_blocking=True)
            return call_probe(fn, p)
    finally:
        # every path: the side stream's pending writes must land before these buffers are
        # freed, or the allocator hands their memory to the next probe mid-write
        torch.cuda.synchronize()


def output_problem(o: Any, like: Tensor, what: str) -> str | None:
    """Why `o` is not a plain dense tensor on `like`'s device (None: it is)."""
    if type(o) is not Tensor and type(o) is not torch.nn.Parameter:
        kind = "a tensor subclass" if isinstance(o, Tensor) else "not a tensor"
        return (f"{what} is {type(o).__module__}.{type(o).__qualname__}: {kind} (a lazy or "
                "deferred output, or a wrapper); a dense torch.Tensor is expected")  # fmt: skip
    if o.is_nested or o.layout != torch.strided:
        return f"{what} has layout {o.layout} (nested={o.is_nested}); a dense tensor is expected"
    if o.device.type != like.device.type:
        return f"{what} is on {o.device}, the inputs on {like.device}"
    return None


def bits(t: Tensor) -> Tensor:
    """A bitwise-comparable copy (NaN == NaN of the same payload)."""
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64, 1: torch.uint8}
    return t.detach().clone().view(ints[t.element_size()])


def same_bits(a: Tensor, b: Tensor) -> bool:
    """Bitwise equality (NaN == NaN of the same payload), without copies."""
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64, 1: torch.uint8}
    return torch.equal(a.detach().view(ints[a.element_size()]),
                       b.detach().view(ints[b.element_size()]))  # fmt: skip


def snapshot(outs: dict[str, Tensor]) -> dict[str, Tensor]:
    """Copies of the outputs as a caller reads them the moment the call returns: enqueued on the
    current stream, no synchronisation first (work left on another stream is not waited for)."""
    return {k: t.detach().clone() for k, t in outs.items()}


def threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def in_flight(snap: dict[str, Tensor], outs: dict[str, Tensor],
              before: set[threading.Thread], grace_s: float = 10.0) -> str:  # fmt: skip
    """'' when the outputs are final at return, else which changed after the call returned.
    Threads the call started and left running get `grace_s` to finish first."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    deadline = time.monotonic() + grace_s
    for t in started:
        t.join(max(0.0, deadline - time.monotonic()))
    changed = [k for k, t in outs.items() if t.numel() and not same_bits(snap[k], t)]
    if not changed:
        return ""
    who = f"; the call left {len(started)} thread(s) running" if started else ""
    return (f"work still in flight when the call returned: {', '.join(changed)} changed after "
            f"it returned (a side stream not joined, a background thread, deferred work){who}")
