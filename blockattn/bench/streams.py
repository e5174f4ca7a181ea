"""Streaming kernels for the read-mostly ceiling (blockattn.bench.measure.read_mostly_ceiling).

`stream_3r1w` reads three bf16 buffers and writes one (d = a + b + c), the forward's traffic
(q, k, v in, O out) with no attention around it: the fastest that this read:write mix moves on
the device is the ceiling a forward pass can approach, the copy's 1:1 mix being another.
Launched on CUDA only (the CPU smoke run times torch.addcmul alone).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _stream_3r1w(a_ptr, b_ptr, c_ptr, d_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, eviction_policy="evict_first")
    b = tl.load(b_ptr + offs, mask=mask, eviction_policy="evict_first")
    c = tl.load(c_ptr + offs, mask=mask, eviction_policy="evict_first")
    tl.store(d_ptr + offs, a + b + c, mask=mask)


def stream_3r1w(a, b, c, d, block: int = 4096, num_warps: int = 8) -> None:
    """d = a + b + c over contiguous 1-D tensors of one size (one launch)."""
    n = a.numel()
    _stream_3r1w[(triton.cdiv(n, block),)](a, b, c, d, n, BLOCK=block, num_warps=num_warps)
