"""`blockattn_fast`: blockattn's kernels in the declared fast precision mode (`precision="fast"`).

The same operator and kernels as `blockattn`, with no hi/lo split: the rotated q, k, v, P and dS
enter their 16-bit MMAs rounded once to the input dtype (as FA v2 rounds P and dS), and the
backward forms dP from V itself with Di in one pass. It is judged by its own accuracy model,
fp32-rounded-operands (ERROR_ANALYSIS.md §2; tolerance files v6 / v7, unreleased), never by
blockattn's; blockattn's rule and its accurate default are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from blockattn.providers._base import Supports, Unsupported
from blockattn.providers._common import BLOCK
from blockattn.providers._timing import Prepared, Timing, grad_leaves, replayed

NAME = "blockattn_fast"
ROLE = "kernel"
# FP32 arithmetic; rotated q/k/v, P and dS rounded once to the input dtype for their MMAs
ACCURACY_MODEL = "fp32-rounded-operands"
# As blockattn, without the projection path (the fast mode is an option of block_attention only)
SUPPORTS = Supports(head_dims=(64, 128), gqa=False, deterministic=True, projection=False,
                    offsets_dtypes=("int32", "int64"), max_seq_len=True, nested=True)  # fmt: skip
PRECISION = "fast"


def KERNEL(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v, max_seq_len=None):
    """The public op in the fast mode, called on the caller's tensors (the contract battery)."""
    import blockattn  # lazy: TRITON_INTERPRET must be set before the kernels are imported

    return blockattn.block_attention(q, k, v, offsets, block_size=block_size, scale=scale,
                                     sinu_pos=sinu_pos, rotate_v=rotate_v,
                                     max_seq_len=max_seq_len, precision=PRECISION)  # fmt: skip


def run(inputs, variant: str) -> dict[str, torch.Tensor]:
    import blockattn  # lazy, as in KERNEL

    spec = inputs.spec
    if spec.D not in (64, 128):
        raise Unsupported(f"blockattn supports D in {{64, 128}}, got D={spec.D}")
    if variant == "projection":
        raise Unsupported("the fast precision mode is an option of block_attention only")
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
        precision=PRECISION,
    )
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), inputs.grad_out)
    return {"O": o.detach(), "dQ": dq, "dK": dk, "dV": dv}


# ----------------------------------------------------------------------------- bench timing


def _timed(rotary: bool, table_in_input_dtype: bool = False) -> Callable[[Any], Prepared]:
    """The public op with precision="fast", timed as blockattn's own entries are (fwd under
    no_grad with max_seq_len, bwd as autograd's replay), so the fast and accurate rows compare.
    `table_in_input_dtype`: the caller's sin/cos table in bf16/fp16 (converted once, untimed)."""

    def prepare(case: Any) -> Prepared:
        from blockattn.ops import block_attention  # lazy, as in run()

        sinu = case.sinu if rotary else None
        if sinu is not None and table_in_input_dtype:
            sinu = sinu.to(case.q.dtype)

        def call(q: Any, k: Any, v: Any) -> Any:
            return block_attention(q, k, v, case.offsets, block_size=BLOCK, scale=case.scale,
                                   sinu_pos=sinu, max_seq_len=case.max_len,
                                   precision=PRECISION)  # fmt: skip

        def fwd() -> Any:
            with torch.no_grad():
                return call(case.q, case.k, case.v)

        lv = grad_leaves(case)
        notes = {"fwd/bwd": "the public op, precision='fast' (max_seq_len given); bwd: "
                            "autograd.grad replayed"}
        if table_in_input_dtype:
            notes["table"] = "sin/cos in the input dtype"
        return replayed(case, call, lv, call(*lv), notes, rotary, fwd)

    return prepare


TIMINGS = (
    Timing("blockattn_fast", False, _timed(False), "blockattn, fast precision, no rotary"),
    Timing("blockattn_rotary_fast", True, _timed(True),
           "blockattn, fast precision, rotary fused in-kernel (fp32 sin/cos table)"),
    Timing("blockattn_rotary_fast_tbl16", True, _timed(True, True),
           "blockattn, fast precision, rotary fused, sin/cos table in the input dtype"),
)
