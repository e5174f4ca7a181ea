"""`sdpa_cudnn` (optional): SDPA restricted to the cuDNN backend, on a jagged nested tensor whose
"sequences" are the 64-token blocks. CUDA only; rotary and projection run outside, in the input
dtype (as for `fa2`). A baseline for the bench; judged like any provider that declares no model.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from blockattn.providers._base import Supports, Unsupported
from blockattn.providers._common import BLOCK, block_cu_seqlens, run_autograd
from blockattn.providers._timing import Prepared, Timing, grad_leaves, replayed

NAME = "sdpa_cudnn"
ROLE = "baseline"
SUPPORTS = Supports(dtypes=("bfloat16", "float16"), devices=("cuda",), gqa=True)


def _attention_on(cu: Tensor, q: Tensor, k: Tensor, v: Tensor, scale: float,
                  block: int = BLOCK) -> Tensor:  # fmt: skip
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def nt(t: Tensor) -> Tensor:
        return torch.nested.nested_tensor_from_jagged(t, cu, max_seqlen=block).transpose(1, 2)

    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        o = F.scaled_dot_product_attention(nt(q), nt(k), nt(v), scale=scale)
    return o.transpose(1, 2).values()


def _attention(q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, scale: float,
               block: int = BLOCK) -> Tensor:  # fmt: skip
    if q.shape[0] == 0:
        return q * 0
    cu = block_cu_seqlens(offsets, block).to(torch.int64)
    return _attention_on(cu, q.contiguous(), k.contiguous(), v.contiguous(), scale, block)


def run(inputs: Any, variant: str) -> dict[str, torch.Tensor]:
    if not torch.cuda.is_available() or inputs.q.device.type != "cuda":
        raise Unsupported("cuDNN attention needs CUDA")
    try:
        return run_autograd(inputs, variant, _attention)
    except Exception as exc:  # a backend that cannot take this case raises assorted errors
        raise Unsupported(f"SDPA cuDNN backend on a jagged NJT failed: "
                          f"{type(exc).__name__}: {exc}") from exc  # fmt: skip


# ----------------------------------------------------------------------------- bench timing


def _timed(case: Any) -> Prepared:
    """SDPA restricted to the cuDNN backend on a jagged nested tensor of the 64-token blocks."""
    if case.q.device.type != "cuda":
        raise Unsupported("cuDNN attention needs CUDA")
    cu = block_cu_seqlens(case.offsets_cpu, device=case.q.device).to(torch.int64)

    def attn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return _attention_on(cu, q, k, v, case.scale)

    try:
        leaves = grad_leaves(case)
        o_graph = attn(*leaves)
        torch.autograd.grad(o_graph, leaves, case.do, retain_graph=True)
    except Exception as exc:
        raise Unsupported(
            f"SDPA cuDNN backend on a jagged NJT (varlen) failed: {type(exc).__name__}: {exc}"
        ) from exc

    notes = {"bwd": "autograd.grad on a retained graph", "path": "NJT + sdpa_kernel(CUDNN)"}
    return replayed(case, attn, leaves, o_graph, notes)


TIMINGS = (Timing("sdpa_cudnn", False, _timed, "SDPA cuDNN backend on a jagged NJT"),)
