"""Public API: torch.library custom ops with fake impls and registered autograd.

`block_attention` and `projection_rotary_attention` validate their inputs, then call the custom
ops `blockattn::attention_fwd` / `blockattn::attention_bwd` (projection: the pair
`blockattn::projection_attention_fwd` / `_bwd`, which take the packed projection and return its
packed gradient), which launch the Triton kernels of `blockattn.kernels.attention`. The ops are
opaque to torch.compile (no graph break).

Host syncs: the only one is the value check of `offsets` (offsets[0] == 0, non-decreasing,
offsets[-1] == T), which reads a CUDA tensor back. It is skipped when `max_seq_len` is given or
while torch.compile traces; the tile table itself is built on device with no sync.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from blockattn.kernels.dispatch import attention_bwd, attention_fwd
from blockattn.kernels.tile_math import INTERPRET
from blockattn.kernels.tiles import build_tile_table
from blockattn.validation import SUPPORTED_DTYPES, check_attention_inputs


def _last_dim_contiguous(t: Tensor) -> Tensor:
    # The kernels take any token/head strides but need unit stride along D for wide loads.
    return t if t.stride(-1) == 1 else t.contiguous()


def _grad_buffer(shape: tuple[int, ...], like: Tensor) -> Tensor:
    """Uninitialised gradient output; every element must be written by the backward kernel.

    One allocation point for both backward ops so that tests can poison it with NaN.
    """
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def _check_backend(t: Tensor) -> None:
    if (
        t.dtype == torch.float32
        and t.device.type == "cuda"
        and torch.cuda.get_device_capability(t.device)[0] >= 10
    ):
        raise TypeError(
            "q.dtype=torch.float32 is not supported on sm_100+ GPUs: Triton 3.6 fails to compile "
            "the fp32 rotary kernels for sm_100 and lowers IEEE fp32 dots to tf32 MMAs there; "
            "use bfloat16 or float16"
        )
    if t.device.type == "cpu" and not INTERPRET:
        raise RuntimeError(
            "blockattn kernels on CPU tensors need the Triton interpreter: set "
            "TRITON_INTERPRET=1 before importing blockattn (or move the tensors to CUDA)"
        )


def _launch_fwd(q, k, v, offsets, sinu_pos, block_size, scale, rotate_v, max_seq_len,
                precision: str) -> Tensor:  # fmt: skip
    """The body of both forward ops (accurate, fast): layouts, tile table, launch."""
    _check_backend(q)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    sinu = None if sinu_pos is None else _last_dim_contiguous(sinu_pos)
    table = build_tile_table(offsets, q.shape[0], block_size, max_seq_len)
    return attention_fwd(q, k, v, table, sinu, scale, block_size, rotate_v, precision=precision)


def _launch_bwd(grad_out, q, k, v, offsets, sinu_pos, block_size, scale, rotate_v, max_seq_len,
                precision: str) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """The body of both backward ops: layouts, tile table, poisonable grads, launch."""
    _check_backend(q)
    q, k, v, grad_out = (_last_dim_contiguous(t) for t in (q, k, v, grad_out))
    sinu = None if sinu_pos is None else _last_dim_contiguous(sinu_pos)
    table = build_tile_table(offsets, q.shape[0], block_size, max_seq_len)
    grads = tuple(_grad_buffer(tuple(q.shape), q) for _ in range(3))
    return attention_bwd(q, k, v, grad_out, table, sinu, scale, block_size, rotate_v, grads,
                         precision=precision)  # fmt: skip


@torch.library.custom_op("blockattn::attention_fwd", mutates_args=())
def _attention_fwd_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    offsets: Tensor,
    sinu_pos: Tensor | None,
    block_size: int,
    scale: float,
    rotate_v: bool,
    max_seq_len: int | None,
) -> Tensor:
    return _launch_fwd(q, k, v, offsets, sinu_pos, block_size, scale, rotate_v, max_seq_len,
                       "accurate")  # fmt: skip


@_attention_fwd_op.register_fake
def _(q, k, v, offsets, sinu_pos, block_size, scale, rotate_v, max_seq_len):
    return q.new_empty(q.shape)


@torch.library.custom_op("blockattn::attention_bwd", mutates_args=())
def _attention_bwd_op(
    grad_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    offsets: Tensor,
    sinu_pos: Tensor | None,
    block_size: int,
    scale: float,
    rotate_v: bool,
    max_seq_len: int | None,
) -> tuple[Tensor, Tensor, Tensor]:
    return _launch_bwd(grad_out, q, k, v, offsets, sinu_pos, block_size, scale, rotate_v,
                       max_seq_len, "accurate")  # fmt: skip


@_attention_bwd_op.register_fake
def _(grad_out, q, k, v, offsets, sinu_pos, block_size, scale, rotate_v, max_seq_len):
    return q.new_empty(q.shape), q.new_empty(q.shape), q.new_empty(q.shape)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, offsets, sinu_pos, block_size, scale, rotate_v, max_seq_len = inputs
    # Saved: the un-rotated inputs and sinu_pos only (no O, no logsumexp, no rotated copies).
    ctx.save_for_backward(q, k, v, offsets, sinu_pos)
    ctx.args = (block_size, scale, rotate_v, max_seq_len)


def _backward(ctx, grad_out):
    q, k, v, offsets, sinu_pos = ctx.saved_tensors
    dq, dk, dv = _attention_bwd_op(grad_out, q, k, v, offsets, sinu_pos, *ctx.args)
    return dq, dk, dv, None, None, None, None, None, None


_attention_fwd_op.register_autograd(_backward, setup_context=_setup_context)


# ----------------------------------------------------------------------------- fast precision
# precision="fast" (blockattn.kernels.dispatch.PRECISIONS): ops of their own, so the accurate
# ops' schemas and launches stay exactly as they were. Same arguments, same saved tensors.


@torch.library.custom_op("blockattn::attention_fast_fwd", mutates_args=())
def _attention_fast_fwd_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    offsets: Tensor,
    sinu_pos: Tensor | None,
    block_size: int,
    scale: float,
    rotate_v: bool,
    max_seq_len: int | None,
) -> Tensor:
    return _launch_fwd(q, k, v, offsets, sinu_pos, block_size, scale, rotate_v, max_seq_len,
                       "fast")  # fmt: skip


@_attention_fast_fwd_op.register_fake
def _(q, k, v, offsets, sinu_pos, block_size, scale, rotate_v, max_seq_len):
    return q.new_empty(q.shape)


@torch.library.custom_op("blockattn::attention_fast_bwd", mutates_args=())
def _attention_fast_bwd_op(
    grad_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    offsets: Tensor,
    sinu_pos: Tensor | None,
    block_size: int,
    scale: float,
    rotate_v: bool,
    max_seq_len: int | None,
) -> tuple[Tensor, Tensor, Tensor]:
    return _launch_bwd(grad_out, q, k, v, offsets, sinu_pos, block_size, scale, rotate_v,
                       max_seq_len, "fast")  # fmt: skip


@_attention_fast_bwd_op.register_fake
def _(grad_out, q, k, v, offsets, sinu_pos, block_size, scale, rotate_v, max_seq_len):
    return q.new_empty(q.shape), q.new_empty(q.shape), q.new_empty(q.shape)


def _fast_backward(ctx, grad_out):
    q, k, v, offsets, sinu_pos = ctx.saved_tensors
    grads = _attention_fast_bwd_op(grad_out, q, k, v, offsets, sinu_pos, *ctx.args)
    return (*grads, None, None, None, None, None, None)


_attention_fast_fwd_op.register_autograd(_fast_backward, setup_context=_setup_context)


# ----------------------------------------------------------------------------- packed projection
# The projection path feeds q, k, v as strided views of one (T, (qheads + 2 kvheads) D) buffer
# and takes its gradient as ONE buffer of that layout: the backward kernel stores dq, dk, dv
# straight into their column slices, so autograd never zero-pads and sums three gradients.
# Autograd's own addmm/mm backward then takes dx = dY @ w^T and dw = x^T @ dY (one GEMM each)
# and dbias = dY.sum(0) on that buffer.


def _split_packed(proj: Tensor, qheads: int, kvheads: int) -> tuple[Tensor, Tensor, Tensor]:
    """(T, H, D) views q | k | v of a (T, (qheads + 2 kvheads) D) buffer (no copies)."""
    T, n = proj.shape
    D = n // (qheads + 2 * kvheads)
    q = proj[:, : qheads * D].view(T, qheads, D)
    k = proj[:, qheads * D : (qheads + kvheads) * D].view(T, kvheads, D)
    v = proj[:, (qheads + kvheads) * D :].view(T, kvheads, D)
    return q, k, v


def _check_packed(proj: Tensor, qheads: int, kvheads: int) -> None:
    # Reached only through projection_rotary_attention, which validates first; direct op calls
    # (opcheck, torch.ops) get a clear error instead of a silently mis-sliced buffer.
    if kvheads != qheads:
        raise ValueError(
            f"kvheads={kvheads} != qheads={qheads}: GQA is not supported by blockattn kernels"
        )
    if proj.dim() != 2 or proj.shape[1] % (qheads + 2 * kvheads):
        raise ValueError(
            f"proj must be (T, (qheads + 2 kvheads) D), got {tuple(proj.shape)} for "
            f"qheads={qheads}, kvheads={kvheads}"
        )


@torch.library.custom_op("blockattn::projection_attention_fwd", mutates_args=())
def _projection_attention_fwd_op(
    proj: Tensor,
    offsets: Tensor,
    sinu_pos: Tensor | None,
    qheads: int,
    kvheads: int,
    block_size: int,
    scale: float,
    rotate_v: bool,
    max_seq_len: int | None,
) -> Tensor:
    _check_packed(proj, qheads, kvheads)
    _check_backend(proj)
    # Same launch as blockattn::attention_fwd on the views: bitwise the same output.
    q, k, v = (_last_dim_contiguous(t) for t in _split_packed(proj, qheads, kvheads))
    sinu = None if sinu_pos is None else _last_dim_contiguous(sinu_pos)
    table = build_tile_table(offsets, proj.shape[0], block_size, max_seq_len)
    return attention_fwd(q, k, v, table, sinu, scale, block_size, rotate_v)


@_projection_attention_fwd_op.register_fake
def _(proj, offsets, sinu_pos, qheads, kvheads, block_size, scale, rotate_v, max_seq_len):
    _check_packed(proj, qheads, kvheads)
    D = proj.shape[1] // (qheads + 2 * kvheads)
    return proj.new_empty((proj.shape[0], qheads, D))


@torch.library.custom_op("blockattn::projection_attention_bwd", mutates_args=())
def _projection_attention_bwd_op(
    grad_out: Tensor,
    proj: Tensor,
    offsets: Tensor,
    sinu_pos: Tensor | None,
    qheads: int,
    kvheads: int,
    block_size: int,
    scale: float,
    rotate_v: bool,
    max_seq_len: int | None,
) -> Tensor:
    _check_packed(proj, qheads, kvheads)
    _check_backend(proj)
    q, k, v = (_last_dim_contiguous(t) for t in _split_packed(proj, qheads, kvheads))
    grad_out = _last_dim_contiguous(grad_out)
    sinu = None if sinu_pos is None else _last_dim_contiguous(sinu_pos)
    table = build_tile_table(offsets, proj.shape[0], block_size, max_seq_len)
    # dY is row-major like the projection autograd would otherwise assemble, so the GEMMs that
    # consume it run on the same layout; dq, dk, dv are its column slices (token stride = row).
    d_proj = _grad_buffer(tuple(proj.shape), proj)
    grads = _split_packed(d_proj, qheads, kvheads)
    attention_bwd(q, k, v, grad_out, table, sinu, scale, block_size, rotate_v, grads)
    return d_proj


@_projection_attention_bwd_op.register_fake
def _(grad_out, proj, offsets, sinu_pos, qheads, kvheads, block_size, scale, rotate_v,
      max_seq_len):  # fmt: skip
    _check_packed(proj, qheads, kvheads)
    return proj.new_empty(proj.shape)


def _projection_setup_context(ctx, inputs, output) -> None:
    proj, offsets, sinu_pos, *args = inputs
    # Saved: the projection (q, k, v un-rotated) and sinu_pos only, as for attention_fwd.
    ctx.save_for_backward(proj, offsets, sinu_pos)
    ctx.args = tuple(args)


def _projection_backward(ctx, grad_out):
    proj, offsets, sinu_pos = ctx.saved_tensors
    d_proj = _projection_attention_bwd_op(grad_out, proj, offsets, sinu_pos, *ctx.args)
    return d_proj, None, None, None, None, None, None, None, None


_projection_attention_fwd_op.register_autograd(
    _projection_backward, setup_context=_projection_setup_context
)


def _checked_scale(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    offsets: Tensor,
    block_size: int,
    scale: float | None,
    sinu_pos: Tensor | None,
    rotate_v: bool,
    max_seq_len: int | None,
) -> float:
    """Validates flat (T, H, D) inputs; returns the softmax scale."""
    if not isinstance(rotate_v, bool):
        raise TypeError(f"rotate_v must be a bool, got {type(rotate_v).__name__}")
    compiling = torch.compiler.is_compiling()
    check_attention_inputs(
        q,
        k,
        v,
        offsets,
        block_size=block_size,
        scale=scale,
        sinu_pos=sinu_pos,
        max_seq_len=max_seq_len,
        check_offset_values=not compiling
        and (
            max_seq_len is None
            or not isinstance(offsets, Tensor)  # rejected by the checks, named there
            or offsets.device.type == "cpu"
        ),
    )
    if sinu_pos is not None and sinu_pos.requires_grad:
        raise ValueError("sinu_pos.requires_grad=True is not supported: no gradient flows to it")
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def block_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    offsets: Tensor | None,
    *,
    block_size: int = 64,
    scale: float | None = None,
    sinu_pos: Tensor | None = None,
    rotate_v: bool = True,
    max_seq_len: int | None = None,
    precision: str = "accurate",
) -> Tensor:
    """Jagged block-diagonal attention: each token attends to the valid tokens of its own block.

    q, k, v: (T, H, D) jagged, or torch.nested jagged tensors (B, j, H, D) with offsets=None.
    offsets: (B+1,) int32/int64, offsets[0] = 0, non-decreasing, offsets[-1] = T.
    Blocks of `block_size` tokens are cut from each sequence's start; the last may be partial.
    sinu_pos: optional (T, D) rotary table [sin | cos] (interleaved pairs), fused into the kernel
    and applied to q, k and, if `rotate_v`, v; gradients are w.r.t. the un-rotated inputs.
    No gradient flows to sinu_pos. `max_seq_len` (optional) makes the call free of host syncs.
    precision: "accurate" (the default; accuracy model fp32-split-operands: every FP32 value
    entering a 16-bit MMA as hi + lo halves) or "fast" (model fp32-rounded-operands: the
    rotated q, k, v, P and dS rounded once to the input dtype, as FA v2 rounds P and dS;
    docs/numerics.md). Returns (T, H, D) in q's dtype (a nested tensor if q was nested).
    """
    if precision not in ("accurate", "fast"):
        raise ValueError(f"precision must be 'accurate' or 'fast', got {precision!r}")
    nested = isinstance(q, Tensor) and q.is_nested
    if nested:
        if not (isinstance(k, Tensor) and k.is_nested and isinstance(v, Tensor) and v.is_nested):
            raise TypeError("k and v must be nested tensors when q is nested")
        if q.layout != torch.jagged:
            raise TypeError("nested q must use layout=torch.jagged")
        nt_offsets = q.offsets()
        if offsets is not None and not torch.equal(offsets.to(nt_offsets), nt_offsets):
            raise ValueError("offsets disagree with the nested tensor q's own offsets")
        offsets = nt_offsets
        q, k, v = q.values(), k.values(), v.values()
    elif offsets is None:
        raise TypeError("offsets is required unless q, k, v are torch.nested jagged tensors")
    sm_scale = _checked_scale(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v, max_seq_len)
    out = _attention_fwd_op(
        q, k, v, offsets, sinu_pos, block_size, sm_scale, bool(rotate_v), max_seq_len
    ) if precision == "accurate" else _attention_fast_fwd_op(
        q, k, v, offsets, sinu_pos, block_size, sm_scale, bool(rotate_v), max_seq_len
    )
    if nested:
        return torch.nested.nested_tensor_from_jagged(out, offsets)
    return out


def projection_rotary_attention(
    x: Tensor,
    w: Tensor,
    sinu_pos: Tensor,
    offsets: Tensor,
    *,
    qheads: int,
    kvheads: int | None = None,
    bias: Tensor | None = None,
    block_size: int = 64,
    scale: float | None = None,
    rotate_v: bool = True,
    max_seq_len: int | None = None,
) -> Tensor:
    """x @ w (+ bias) split into q | k | v (qheads, kvheads, kvheads heads), fused rotary attention.

    x: (T, d_in); w: (d_in, (qheads + 2 * kvheads) * D); bias: ((qheads + 2 * kvheads) * D,).
    q, k, v are strided views of the projection (no copies); the kernels read them in place.
    The backward writes dq, dk, dv into one packed (T, (qheads + 2 * kvheads) * D) gradient, so
    dx and dw take one GEMM each.
    GQA (kvheads != qheads) is not supported by these kernels and is rejected.
    Returns (T, qheads, D), differentiable w.r.t. x, w and bias.
    """
    return _projection_rotary_attention(
        x,
        w,
        sinu_pos,
        offsets,
        qheads=qheads,
        kvheads=kvheads,
        bias=bias,
        block_size=block_size,
        scale=scale,
        rotate_v=rotate_v,
        max_seq_len=max_seq_len,
    )


def _projection_rotary_attention(
    x: Tensor,
    w: Tensor,
    sinu_pos: Tensor,
    offsets: Tensor,
    *,
    qheads: int,
    kvheads: int | None = None,
    bias: Tensor | None = None,
    block_size: int = 64,
    scale: float | None = None,
    rotate_v: bool = True,
    max_seq_len: int | None = None,
    packed_grad: bool = True,
) -> Tensor:
    """projection_rotary_attention; packed_grad=False keeps the unfused backward (autograd
    zero-pads dq, dk, dv into three projection-sized tensors and sums them) for comparison."""
    if isinstance(qheads, bool) or not isinstance(qheads, int) or qheads < 1:
        raise ValueError(f"qheads must be a positive int, got {qheads!r}")
    kvheads = qheads if kvheads is None else kvheads
    if kvheads != qheads:
        raise ValueError(
            f"kvheads={kvheads} != qheads={qheads}: GQA is not supported by blockattn kernels"
        )
    for name, t in (("x", x), ("w", w)):
        if not isinstance(t, Tensor) or t.dim() != 2:
            raise ValueError(f"{name} must be a 2-D tensor")
    if w.shape[0] != x.shape[1]:
        raise ValueError(f"w.shape[0]={w.shape[0]} must equal x.shape[1]={x.shape[1]}")
    n_heads = qheads + 2 * kvheads
    if w.shape[1] % n_heads:
        raise ValueError(
            f"w.shape[1]={w.shape[1]} must be divisible by qheads + 2*kvheads={n_heads}"
        )
    if w.dtype != x.dtype or w.device != x.device:
        raise TypeError(f"w ({w.dtype}, {w.device}) must match x ({x.dtype}, {x.device})")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"x.dtype must be one of {SUPPORTED_DTYPES}, got {x.dtype}")
    if bias is not None:
        if bias.shape != (w.shape[1],):
            raise ValueError(f"bias.shape must be ({w.shape[1]},), got {tuple(bias.shape)}")
        if bias.dtype != x.dtype or bias.device != x.device:
            raise TypeError(f"bias ({bias.dtype}, {bias.device}) must match x")
    proj = x @ w if bias is None else torch.addmm(bias, x, w)
    q, k, v = _split_packed(proj, qheads, kvheads)
    if not packed_grad:
        return block_attention(
            q,
            k,
            v,
            offsets,
            block_size=block_size,
            scale=scale,
            sinu_pos=sinu_pos,
            rotate_v=rotate_v,
            max_seq_len=max_seq_len,
        )
    sm_scale = _checked_scale(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v, max_seq_len)
    return _projection_attention_fwd_op(
        proj, offsets, sinu_pos, qheads, kvheads, block_size, sm_scale, rotate_v, max_seq_len
    )
