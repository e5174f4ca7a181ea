"""`fa2`: PyTorch's FlashAttention-2 varlen kernels with cu_seqlens cut at every 64-token block.

Block-diagonal attention == varlen attention whose "sequences" are the 64-token blocks, so FA2
with max_q = max_k = 64 computes exactly our operator. Rotary / projection run outside the
kernel in the input dtype (autograd), the attention core through aten's FA2 fwd/bwd.

FA3/FA4: torch >= 2.9 can swap the aten flash kernels for FA3/FA4 via
`torch.nn.attention.activate_flash_attention_impl`. This provider is "fa2" by name, so it refuses
when `torch.nn.attention.current_flash_attention_impl()` reports an active impl. On torch builds
without that API no swap mechanism exists and the aten op is FA2.
"""

from __future__ import annotations

import torch

from blockattn.providers import Supports, Unsupported
from blockattn.providers._common import BLOCK, block_cu_seqlens, run_autograd

NAME = "fa2"
ROLE = "baseline"
# FA v2: P and dS rounded to the input dtype before their GEMMs, Di from the stored O
ACCURACY_MODEL = "fa2-rounded-p-ds"
# aten's flash kernels: CUDA, 16-bit only; rotary/projection outside (GQA by repeat)
SUPPORTS = Supports(dtypes=("bfloat16", "float16"), devices=("cuda",), gqa=True)


def active_flash_impl() -> str | None:
    import torch.nn.attention as attn

    fn = getattr(attn, "current_flash_attention_impl", None)
    return fn() if fn is not None else None


class _FA2Block(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu, scale):  # type: ignore[override]
        # Schema (torch 2.13): (q, k, v, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
        # is_causal, return_debug_mask, *, scale) -> (out, lse, rng_state, unused, debug_mask)
        out, lse, rng, unused, _ = torch.ops.aten._flash_attention_forward(
            q, k, v, cu, cu, BLOCK, BLOCK, 0.0, False, False, scale=scale
        )
        ctx.save_for_backward(q, k, v, out, lse, cu, rng, unused)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, out, lse, cu, rng, unused = ctx.saved_tensors
        dq, dk, dv = torch.ops.aten._flash_attention_backward(
            grad_out.contiguous(),
            q,
            k,
            v,
            out,
            lse,
            cu,
            cu,
            BLOCK,
            BLOCK,
            0.0,
            False,
            rng,
            unused,
            scale=ctx.scale,
        )
        return dq, dk, dv, None, None


def _attention(q, k, v, offsets, scale):
    if q.shape[0] == 0:
        return q * 0
    cu = block_cu_seqlens(offsets)
    return _FA2Block.apply(q.contiguous(), k.contiguous(), v.contiguous(), cu, scale)


def refusal(device_type: str, dtype: str) -> str | None:
    """Why FA2 cannot serve as the baseline here (None: it can)."""
    if not torch.cuda.is_available() or device_type != "cuda":
        return "fa2 needs a CUDA device (aten flash attention has no CPU kernel)"
    impl = active_flash_impl()
    if impl is not None:
        return f"flash attention impl {impl!r} is active, so aten's flash op is not FA2"
    if dtype not in ("bfloat16", "float16"):
        return f"FA2 supports bf16/fp16 only, got {dtype}"
    return None


def run(inputs, variant: str) -> dict[str, torch.Tensor]:
    why = refusal(inputs.q.device.type, inputs.spec.dtype)
    if why:
        raise Unsupported(why)
    return run_autograd(inputs, variant, _attention)
