"""`fa4`: FlashAttention-4 (PyPI `flash-attn-4`, CuTe DSL) varlen with cu_seqlens at every block.

Like `fa2`: each block is one varlen "sequence" (max_seqlen = block size), so FA4 computes our
operator; rotary runs outside in the input dtype. The optional extra `blockattn[fa4]` installs
it. Where the package is missing, or the GPU is neither Hopper (sm_90) nor Blackwell (sm_100),
every case is "unsupported (declared)" with the reason. The adapter hands FA4 the caller's own
views (no `.contiguous()`), so the contract battery judges FA4's own handling of strides.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import torch
from torch import Tensor

from blockattn.providers._base import Supports, Unsupported
from blockattn.providers._common import BLOCK, block_cu_seqlens, kernel_from, run_autograd
from blockattn.providers._timing import Prepared, Timing, grad_leaves, replayed

NAME = "fa4"
ROLE = "baseline"
DISTRIBUTION = "flash-attn-4"
# FA-style: FP32 scores and softmax, P and dS rounded to the input dtype before their GEMMs,
# Di = rowsum(dO * O) from the stored O (its bwd preprocess kernel): FA v2's model.
ACCURACY_MODEL = "fa2-rounded-p-ds"


def version() -> str | None:
    """The installed flash-attn-4 version (None: not installed)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def _unavailable() -> str | None:
    if version() is None:
        return f"{DISTRIBUTION} is not installed (pip install 'blockattn[fa4]')"
    return None


SUPPORTS = Supports(dtypes=("bfloat16", "float16"), devices=("cuda",), archs=("sm_90", "sm_100"),
                    head_dims=(64, 128), gqa=True, offsets_dtypes=("int32", "int64"),
                    max_seq_len=True, unavailable=_unavailable())  # fmt: skip


def _varlen_func() -> Any:
    try:
        from flash_attn.cute import flash_attn_varlen_func
    except Exception as exc:  # ImportError, or the DSL failing to load its libraries
        raise Unsupported(f"{DISTRIBUTION} {version()} does not import: "
                          f"{type(exc).__name__}: {exc}") from exc  # fmt: skip
    return flash_attn_varlen_func


def _require_cuda(q: Tensor) -> None:
    if q.device.type != "cuda":
        raise Unsupported("fa4 needs a CUDA device")


def _attention(q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, scale: float,
               block: int = BLOCK) -> Tensor:  # fmt: skip
    if q.shape[0] == 0:  # no block at all: FA4 is never called with an empty batch
        return q * 0
    _require_cuda(q)
    # every block of the CASE's block size is one varlen sequence (never 64 regardless)
    cu = block_cu_seqlens(offsets, block)
    res = _varlen_func()(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=block,
                         max_seqlen_k=block, softmax_scale=scale, causal=False)  # fmt: skip
    return res[0] if isinstance(res, tuple) else res


def run(inputs, variant: str) -> dict[str, torch.Tensor]:
    return run_autograd(inputs, variant, _attention)


KERNEL = kernel_from(_attention)  # rotary outside, as in run()


def _timed(case: Any) -> Prepared:
    """FA4 varlen forward; backward replayed through autograd (FA4's own bwd kernels)."""
    if SUPPORTS.unavailable:
        raise Unsupported(SUPPORTS.unavailable)
    if case.dtype not in (torch.bfloat16, torch.float16):
        raise Unsupported(f"fa4 supports bf16/fp16 only, got {case.dtype}")
    fn = _varlen_func()
    cu = block_cu_seqlens(case.offsets_cpu, device=case.q.device)
    s = case.scale

    def attn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        res = fn(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=BLOCK,
                 max_seqlen_k=BLOCK, softmax_scale=s, causal=False)  # fmt: skip
        return res[0] if isinstance(res, tuple) else res

    leaves = grad_leaves(case)
    notes = {"version": str(version()), "max_seqlen_q=k": str(BLOCK),
             "bwd": "autograd.grad on a retained graph"}  # fmt: skip

    def fwd() -> Tensor:
        with torch.no_grad():
            return attn(case.q, case.k, case.v)

    return replayed(case, attn, leaves, attn(*leaves), notes, fwd=fwd)


TIMINGS = (Timing("fa4", False, _timed, "FlashAttention-4 varlen, cu_seqlens at every block"),)
