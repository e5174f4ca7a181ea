"""`blockattn_fast`: blockattn's kernels in the declared fast precision mode (`precision="fast"`).

The same operator and kernels as `blockattn`, with no hi/lo split: the rotated q, k, v, P and dS
enter their 16-bit MMAs rounded once to the input dtype (as FA v2 rounds P and dS), and the
backward forms dP from V itself with Di in one pass. It is judged by its own accuracy model,
fp32-rounded-operands (ERROR_ANALYSIS.md §2; tolerance files v6 / v7), never by
blockattn's; blockattn's rule and its accurate default are unchanged.
"""

from __future__ import annotations

import torch

from blockattn.providers._base import Supports, Unsupported
from blockattn.providers._timing import Timing
from blockattn.providers.blockattn_kernel import run_public, timed_public_op
from blockattn.validation import FP32_GPU_MAX_BLOCK_SIZE

NAME = "blockattn_fast"
ROLE = "kernel"
# FP32 arithmetic; rotated q/k/v, P and dS rounded once to the input dtype for their MMAs
ACCURACY_MODEL = "fp32-rounded-operands"
# As blockattn, without the projection path (the fast mode is an option of block_attention only)
SUPPORTS = Supports(head_dims=(64, 128), gqa=False, deterministic=True,
                    fp32_gpu_max_block_size=FP32_GPU_MAX_BLOCK_SIZE, projection=False,
                    offsets_dtypes=("int32", "int64"), max_seq_len=True, nested=True)  # fmt: skip
PRECISION = "fast"


def KERNEL(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v, max_seq_len=None):
    """The public op in the fast mode, called on the caller's tensors (the contract battery)."""
    import blockattn  # lazy: TRITON_INTERPRET must be set before the kernels are imported

    return blockattn.block_attention(q, k, v, offsets, block_size=block_size, scale=scale,
                                     sinu_pos=sinu_pos, rotate_v=rotate_v,
                                     max_seq_len=max_seq_len, precision=PRECISION)  # fmt: skip


def run(inputs, variant: str) -> dict[str, torch.Tensor]:
    spec = inputs.spec
    if spec.D not in (64, 128):
        raise Unsupported(f"blockattn supports D in {{64, 128}}, got D={spec.D}")
    if variant == "projection":
        raise Unsupported("the fast precision mode is an option of block_attention only")
    return run_public(inputs, variant, PRECISION)


# ----------------------------------------------------------------------------- bench timing
# The public op with precision="fast", timed as blockattn's own entries are, so the rows compare.

TIMINGS = (
    Timing("blockattn_fast", False, timed_public_op(False, PRECISION),
           "blockattn, fast precision, no rotary"),
    Timing("blockattn_rotary_fast", True, timed_public_op(True, PRECISION),
           "blockattn, fast precision, rotary fused in-kernel (fp32 sin/cos table)"),
    Timing("blockattn_rotary_fast_tbl16", True, timed_public_op(True, PRECISION, True),
           "blockattn, fast precision, rotary fused, sin/cos table in the input dtype"),
)
