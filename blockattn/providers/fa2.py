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

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from blockattn.providers._base import Supports, Unsupported
from blockattn.providers._common import BLOCK, block_cu_seqlens, kernel_from, run_autograd
from blockattn.providers._timing import Prepared, Timing, grad_leaves

NAME = "fa2"
ROLE = "baseline"
# FA v2: P and dS rounded to the input dtype before their GEMMs, Di from the stored O
ACCURACY_MODEL = "fa2-rounded-p-ds"
# aten's flash kernels: CUDA, 16-bit only; rotary/projection outside (GQA by repeat). Its
# masking computes -inf * scale: NaN at scale 0, +inf (then NaN) below 0, in every row whose
# tile holds a masked key (H100, results/h100_2026-11-27i). A negative scale is served exactly
# by negating q (softmax(s QK^T) = softmax(|s| (-Q) K^T), autograd negates dQ back); 0 is
# declared unsupported.
SUPPORTS = Supports(dtypes=("bfloat16", "float16"), devices=("cuda",), gqa=True,
                    offsets_dtypes=("int32", "int64"), max_seq_len=True,
                    scales=("positive", "negative"))  # fmt: skip


def active_flash_impl() -> str | None:
    import torch.nn.attention as attn

    fn = getattr(attn, "current_flash_attention_impl", None)
    return fn() if fn is not None else None


# ----------------------------------------------------------------------------- aten FA2 calls

# Argument names differ across torch versions (rng_state/unused were philox_seed/philox_offset).
_ALIASES = {"rng_state": ("philox_seed",), "unused": ("philox_offset",)}


def call_by_schema(op: Any, **named: Any) -> Any:
    """Call an aten op by keyword, mapping our names onto the installed schema's names.

    Keeps working if positional order or argument names shift between torch versions, and
    fails with the schema in the message if a required argument has no value.
    """
    schema = op.default._schema
    kwargs: dict[str, Any] = {}
    for arg in schema.arguments:
        for cand in (arg.name, *(k for k, alts in _ALIASES.items() if arg.name in alts)):
            if cand in named:
                kwargs[arg.name] = named[cand]
                break
        else:
            if not arg.has_default_value():
                raise Unsupported(f"no value for required argument {arg.name!r} of {schema}")
    return op(**kwargs)


def flash_info() -> dict[str, Any]:
    """Which flash implementation backs aten's op (FA3/FA4 can be swapped in on torch >= 2.9)."""
    import torch.nn.attention as attn

    info: dict[str, Any] = {}
    for key, fn_name in (
        ("current_impl", "current_flash_attention_impl"),
        ("available_impls", "list_flash_attention_impls"),
        ("flash_version", "_get_flash_version"),
    ):
        fn = getattr(attn, fn_name, None)
        try:
            info[key] = fn() if fn is not None else f"n/a (torch.nn.attention.{fn_name} absent)"
        except Exception as exc:  # recorded, never fatal
            info[key] = f"error: {exc}"
    for op_name in ("_flash_attention_forward", "_flash_attention_backward"):
        op = getattr(torch.ops.aten, op_name, None)
        info[f"{op_name}_schema"] = str(op.default._schema) if op is not None else "absent"
    return info


def _require_fa2(case: Any) -> None:
    if case.q.device.type != "cuda":
        raise Unsupported("aten flash attention has no CPU kernel (needs CUDA)")
    if case.dtype not in (torch.bfloat16, torch.float16):
        raise Unsupported(f"FA2 supports bf16/fp16 only, got {case.dtype}")
    impl = flash_info().get("current_impl")
    if impl not in (None, "n/a"):
        raise Unsupported(f"flash impl {impl!r} is active: aten's op is not FA2")


# Every block is one varlen "sequence": cu_seqlens cut at each, max_q = max_k = block size.
def _varlen(cu: Tensor, block: int) -> dict[str, Any]:
    return dict(cum_seq_q=cu, cum_seq_k=cu, max_q=block, max_k=block, dropout_p=0.0,
                is_causal=False)  # fmt: skip


def _fa2_fwd(q: Tensor, k: Tensor, v: Tensor, cu: Tensor, scale: float,
             block: int = BLOCK) -> tuple:  # fmt: skip
    return call_by_schema(
        torch.ops.aten._flash_attention_forward,
        query=q,
        key=k,
        value=v,
        **_varlen(cu, block),
        return_debug_mask=False,
        scale=scale,
    )


def _fa2_bwd(do: Tensor, q: Tensor, k: Tensor, v: Tensor, fwd_out: tuple, cu: Tensor, scale: float,
             block: int = BLOCK):  # fmt: skip
    # fwd outputs by position: (out, logsumexp, rng_state|philox_seed, unused|philox_offset, dbg)
    return call_by_schema(
        torch.ops.aten._flash_attention_backward,
        grad_out=do,
        query=q,
        key=k,
        value=v,
        out=fwd_out[0],
        logsumexp=fwd_out[1],
        **_varlen(cu, block),
        rng_state=fwd_out[2],
        unused=fwd_out[3],
        scale=scale,
    )


class _FA2Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu, scale, block=BLOCK):  # type: ignore[override]
        res = _fa2_fwd(q, k, v, cu, scale, block)
        ctx.save_for_backward(q, k, v, cu, *res[:4])
        ctx.scale, ctx.block = scale, block
        return res[0]

    @staticmethod
    def backward(ctx, do):  # type: ignore[override]
        q, k, v, cu, *res = ctx.saved_tensors
        dq, dk, dv = _fa2_bwd(do.contiguous(), q, k, v, tuple(res), cu, ctx.scale, ctx.block)
        return dq, dk, dv, None, None, None


def _attention(q, k, v, offsets, scale, block: int = BLOCK):
    if q.shape[0] == 0:
        return q * 0
    cu = block_cu_seqlens(offsets, block)  # the CASE's block size (never 64 regardless)
    if scale is not None and scale < 0:  # exact: FA2 itself only takes a positive scale
        q, scale = -q, -scale
    if scale == 0:
        raise Unsupported("FA v2's masking computes -inf * scale: NaN at scale 0")
    return _FA2Fn.apply(q.contiguous(), k.contiguous(), v.contiguous(), cu, scale, block)


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


def _checked_attention(q, k, v, offsets, scale, block: int = BLOCK):
    why = refusal(q.device.type, str(q.dtype).removeprefix("torch."))
    if why:
        raise Unsupported(why)
    return _attention(q, k, v, offsets, scale, block)


KERNEL = kernel_from(_checked_attention)  # rotary outside, as in run()


# ----------------------------------------------------------------------------- bench timing
# Baseline-favourable choices (the targets are ratios against these baselines): the unfused
# rotary gets its sin/cos halves already split, broadcast and cast to the input dtype (hoisted
# out of every timed call); cu_seqlens for the 64-token blocks are precomputed once.

# ----------------------------------------------------------------------------- rotary (unfused)


def _sin_cos(case: Any) -> tuple[Tensor, Tensor]:
    half = case.D // 2
    sin = case.sinu[:, :half].to(case.dtype).unsqueeze(1).contiguous()  # (T, 1, D/2)
    cos = case.sinu[:, half:].to(case.dtype).unsqueeze(1).contiguous()
    return sin, cos


def rotary_fwd3(q: Tensor, k: Tensor, v: Tensor, sin: Tensor, cos: Tensor) -> tuple:
    """Rotate interleaved pairs of q, k, v: (x0, x1) -> (x0 c - x1 s, x1 c + x0 s)."""

    def rot(x: Tensor) -> Tensor:
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2)

    return rot(q), rot(k), rot(v)


def rotary_bwd3(gq: Tensor, gk: Tensor, gv: Tensor, sin: Tensor, cos: Tensor) -> tuple:
    """Transpose rotation: (g0, g1) -> (g0 c + g1 s, g1 c - g0 s)."""

    def rot_t(g: Tensor) -> Tensor:
        g0, g1 = g[..., 0::2], g[..., 1::2]
        return torch.stack((g0 * cos + g1 * sin, g1 * cos - g0 * sin), dim=-1).flatten(-2)

    return rot_t(gq), rot_t(gk), rot_t(gv)


class _RotaryFn(torch.autograd.Function):
    """Rotary of (q, k, v) with an explicit transpose-rotation backward (fwd/bwd fns given)."""

    @staticmethod
    def forward(ctx, q, k, v, sin, cos, fwd_fn, bwd_fn):  # type: ignore[override]
        ctx.save_for_backward(sin, cos)
        ctx.bwd_fn = bwd_fn
        return fwd_fn(q, k, v, sin, cos)

    @staticmethod
    def backward(ctx, gq, gk, gv):  # type: ignore[override]
        sin, cos = ctx.saved_tensors
        return (*ctx.bwd_fn(gq, gk, gv, sin, cos), None, None, None, None)


_COMPILED: dict[str, Callable] = {}


def _compiled_rotary() -> tuple[Callable, Callable]:
    if not _COMPILED:
        _COMPILED["fwd"] = torch.compile(rotary_fwd3, dynamic=False)
        _COMPILED["bwd"] = torch.compile(rotary_bwd3, dynamic=False)
    return _COMPILED["fwd"], _COMPILED["bwd"]


def _timed(rotary: str | None) -> Callable[[Any], Prepared]:
    """FA2 varlen on 64-token blocks; rotary None | "eager" | "compiled" done outside."""

    def prepare(case: Any) -> Prepared:
        _require_fa2(case)
        cu = block_cu_seqlens(case.offsets_cpu, device=case.q.device)
        q, k, v, do, s = case.q, case.k, case.v, case.do, case.scale
        notes = {"max_q=max_k": str(BLOCK), "n_blocks": str(cu.numel() - 1)}
        if rotary is None:
            saved = _fa2_fwd(q, k, v, cu, s)
            leaves = grad_leaves(case)

            def fwdbwd_plain() -> Any:
                o = _FA2Fn.apply(*leaves, cu, s)
                return torch.autograd.grad(o, leaves, do)

            return Prepared(
                fwd=lambda: _fa2_fwd(q, k, v, cu, s)[0],
                bwd=lambda: _fa2_bwd(do, q, k, v, saved, cu, s),
                fwdbwd=fwdbwd_plain,
                rotary=False,
                notes=notes,
            )
        rf, rb = (rotary_fwd3, rotary_bwd3) if rotary == "eager" else _compiled_rotary()
        sin, cos = _sin_cos(case)
        rq, rk, rv = (t.contiguous() for t in rf(q, k, v, sin, cos))
        saved = _fa2_fwd(rq, rk, rv, cu, s)
        leaves = grad_leaves(case)

        def fwd() -> Tensor:
            a, b, c = rf(q, k, v, sin, cos)
            return _fa2_fwd(a.contiguous(), b.contiguous(), c.contiguous(), cu, s)[0]

        def bwd() -> tuple[Tensor, Tensor, Tensor]:
            gq, gk, gv = _fa2_bwd(do, rq, rk, rv, saved, cu, s)
            return rb(gq, gk, gv, sin, cos)

        def fwdbwd() -> Any:
            a, b, c = _RotaryFn.apply(*leaves, sin, cos, rf, rb)
            o = _FA2Fn.apply(a.contiguous(), b.contiguous(), c.contiguous(), cu, s)
            return torch.autograd.grad(o, leaves, do)

        notes["rotary"] = f"{rotary} PyTorch, in {case.dtype}, sin/cos pre-split and pre-cast"
        return Prepared(fwd=fwd, bwd=bwd, fwdbwd=fwdbwd, rotary=True, notes=notes)

    return prepare


TIMINGS = (
    Timing("fa2", False, _timed(None), "aten FA2 varlen, cu_seqlens at every 64-token block"),
    Timing("fa2_rotary_eager", True, _timed("eager"), "FA2 + eager PyTorch rotary"),
    Timing("fa2_rotary_compiled", True, _timed("compiled"), "FA2 + torch.compile'd rotary"),
)
