"""`blockattn`: the Triton kernels under test (plain, fused rotary, fused projection)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from blockattn.providers._base import Supports, Unsupported
from blockattn.providers._common import BLOCK
from blockattn.providers._timing import Prepared, Timing, grad_leaves, replayed
from blockattn.validation import FP32_GPU_MAX_BLOCK_SIZE

NAME = "blockattn"
ROLE = "kernel"
# FP32 arithmetic, 16-bit MMA operands as hi + lo halves, one rounding at the store
ACCURACY_MODEL = "fp32-split-operands"
# bf16/fp16 (production) and fp32 (the reference path); the kernels reject GQA and other head dims
# block_size 1..128; no atomics, one program per tile: bitwise deterministic
# the op takes int32/int64 offsets, max_seq_len and torch.nested jagged tensors
SUPPORTS = Supports(head_dims=(64, 128), gqa=False, deterministic=True,
                    fp32_gpu_max_block_size=FP32_GPU_MAX_BLOCK_SIZE,
                    offsets_dtypes=("int32", "int64"), max_seq_len=True, nested=True)  # fmt: skip


def KERNEL(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v, max_seq_len=None):
    """The public op itself, called on the caller's tensors (the contract battery)."""
    import blockattn  # lazy: TRITON_INTERPRET must be set before the kernels are imported

    return blockattn.block_attention(q, k, v, offsets, block_size=block_size, scale=scale,
                                     sinu_pos=sinu_pos, rotate_v=rotate_v,
                                     max_seq_len=max_seq_len)  # fmt: skip


def run(inputs, variant: str) -> dict[str, torch.Tensor]:
    import blockattn  # lazy: TRITON_INTERPRET must be set before the kernels are imported

    spec = inputs.spec
    if spec.D not in (64, 128):
        raise Unsupported(f"blockattn supports D in {{64, 128}}, got D={spec.D}")
    if variant == "projection" and inputs.kvheads != inputs.qheads:
        raise Unsupported(f"blockattn has no GQA (kvheads={inputs.kvheads} != {inputs.qheads})")
    if variant == "projection":
        x = inputs.x.detach().clone().requires_grad_(True)
        w = inputs.w.detach().clone().requires_grad_(True)
        b = inputs.bias.detach().clone().requires_grad_(True)
        o = blockattn.projection_rotary_attention(
            x,
            w,
            inputs.sinu_pos,
            inputs.offsets,
            qheads=inputs.qheads,
            kvheads=inputs.kvheads,
            bias=b,
            block_size=spec.block_size,
            scale=spec.scale,
            rotate_v=spec.rotate_v,
            max_seq_len=inputs.max_seq_len,
        )
        dx, dw, db = torch.autograd.grad(o, (x, w, b), inputs.grad_out)
        return {"O": o.detach(), "dX": dx, "dW": dw, "dbias": db}
    return run_public(inputs, variant)


def run_public(inputs, variant: str, precision: str = "accurate") -> dict[str, torch.Tensor]:
    """`block_attention` in `precision` on private copies of a case's q, k, v: O and grads."""
    import blockattn  # lazy, as in run()

    spec = inputs.spec
    q = inputs.q.detach().clone().requires_grad_(True)
    k = inputs.k.detach().clone().requires_grad_(True)
    v = inputs.v.detach().clone().requires_grad_(True)
    o = blockattn.block_attention(
        q,
        k,
        v,
        inputs.offsets,
        block_size=spec.block_size,
        scale=spec.scale,
        sinu_pos=inputs.sinu_pos if variant == "rotary" else None,
        rotate_v=spec.rotate_v,
        max_seq_len=inputs.max_seq_len,
        precision=precision,
    )
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), inputs.grad_out)
    return {"O": o.detach(), "dQ": dq, "dK": dk, "dV": dv}


# ----------------------------------------------------------------------------- bench timing


def timed_public_op(rotary: bool, precision: str = "accurate",
                    table_in_input_dtype: bool = False) -> Callable[[Any], Prepared]:  # fmt: skip
    """The public op timed exactly as an outside kernel is (`_timing.kernel_timing`): fwd under
    no_grad with max_seq_len, bwd as autograd's replay. A user who wraps `block_attention` as
    their own provider reads the same times as this built-in entry (issue 41: within 3 %).
    `table_in_input_dtype`: the caller's sin/cos table in bf16/fp16 (converted once, untimed)."""

    def prepare(case: Any) -> Prepared:
        from blockattn.ops import block_attention  # lazy, as in run()

        sinu = case.sinu if rotary else None
        if sinu is not None and table_in_input_dtype:
            sinu = sinu.to(case.q.dtype)

        def call(q: Any, k: Any, v: Any) -> Any:
            return block_attention(q, k, v, case.offsets, block_size=BLOCK, scale=case.scale,
                                   sinu_pos=sinu, max_seq_len=case.max_len,
                                   precision=precision)  # fmt: skip

        def fwd() -> Any:
            with torch.no_grad():
                return call(case.q, case.k, case.v)

        lv = grad_leaves(case)
        op = "the public op" if precision == "accurate" else f"the public op, {precision=}"
        notes = {"fwd/bwd": f"{op} (max_seq_len given); bwd: autograd.grad replayed"}
        if table_in_input_dtype:
            notes["table"] = "sin/cos in the input dtype"
        return replayed(case, call, lv, call(*lv), notes, rotary, fwd)

    return prepare


TIMINGS = (
    Timing("blockattn", False, timed_public_op(False), "blockattn Triton kernels, no rotary"),
    Timing("blockattn_rotary", True, timed_public_op(True), "blockattn, rotary fused in-kernel"),
)
