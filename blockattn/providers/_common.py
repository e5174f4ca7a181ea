"""Same-precision PyTorch building blocks shared by baseline providers.

Deliberately independent of `oracles` and of the Triton kernels: a baseline must not share code
(and therefore bugs) with either side of the comparison.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

BLOCK = 64


def rotary(x: torch.Tensor, sinu_pos: torch.Tensor) -> torch.Tensor:
    """Interleaved-pair rotary in x's dtype. sinu_pos (T, D) = [sin | cos], each (T, D/2).

    Pair (x[2i], x[2i+1]) is rotated by angle_i: (a cos - b sin, a sin + b cos).
    """
    D = x.shape[-1]
    s = sinu_pos[:, : D // 2].to(x.dtype).unsqueeze(1)  # (T, 1, D/2) broadcasts over heads
    c = sinu_pos[:, D // 2 :].to(x.dtype).unsqueeze(1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)


def block_layout(offsets: torch.Tensor, T: int, block: int = BLOCK) -> tuple[torch.Tensor, int]:
    """Map each token to its slot in a padded (n_blocks * block) layout.

    Blocks restart at every sequence start, so slot = (first block of its sequence + pos // block)
    * block + pos % block. Returns (slot per token, n_blocks).
    """
    off = offsets.to(torch.int64)
    lens = off[1:] - off[:-1]
    nblk = (lens + block - 1) // block
    first_blk = torch.cumsum(nblk, 0) - nblk
    tok = torch.arange(T, device=off.device)
    seq = torch.searchsorted(off[1:], tok, right=True)
    pos = tok - off[seq]
    slot = (first_blk[seq] + pos // block) * block + pos % block
    return slot, int(nblk.sum().item())


def block_cu_seqlens(
    offsets: torch.Tensor, block: int = BLOCK, device: torch.device | None = None
) -> torch.Tensor:
    """cu_seqlens cut every `block` tokens of every sequence (empty sequences add no cut), as
    int32 on `device` (default: the offsets' device). Vectorised on the host: shape P has
    ~22k blocks."""
    off = offsets.to(torch.int64).cpu()
    lens = off[1:] - off[:-1]
    nblk = (lens + block - 1) // block
    seq = torch.repeat_interleave(torch.arange(lens.numel()), nblk)
    j = torch.arange(int(nblk.sum())) - (torch.cumsum(nblk, 0) - nblk)[seq]
    ends = torch.minimum(off[:-1][seq] + (j + 1) * block, off[1:][seq])
    cu = torch.cat((torch.zeros(1, dtype=torch.int64), ends))
    return cu.to(torch.int32).to(offsets.device if device is None else device)


def eager_block_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    offsets: torch.Tensor,
    scale: float,
    block: int = BLOCK,
) -> torch.Tensor:
    """Padded-block attention in the input dtype; differentiable through autograd."""
    T, H, D = q.shape
    if T == 0:
        return q * 0  # keeps the graph (and grads of shape (0, H, D))
    slot, nb = block_layout(offsets, T, block)
    valid = torch.zeros(nb * block, dtype=torch.bool, device=q.device)
    valid[slot] = True

    def pad(t: torch.Tensor) -> torch.Tensor:
        z = t.new_zeros(nb * block, t.shape[1], t.shape[2])
        return z.index_copy(0, slot, t).view(nb, block, t.shape[1], t.shape[2]).transpose(1, 2)

    qp, kp, vp = pad(q), pad(k), pad(v)  # (nb, H, block, D)
    s = torch.matmul(qp, kp.transpose(-1, -2)) * scale
    # Key padding mask: padded key slots of a partial block must get zero probability.
    keymask = valid.view(nb, 1, 1, block)
    s = s.masked_fill(~keymask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    o = torch.matmul(p, vp)  # (nb, H, block, D)
    return o.transpose(1, 2).reshape(nb * block, H, D).index_select(0, slot)


def split_projection(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    qheads: int,
    kvheads: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x @ w + bias -> (q, k, v) with k/v heads repeated for GQA. One GEMM with the bias in its
    epilogue (as `nn.Linear`), rounded once, as the accuracy models say: x @ w rounded and then
    the bias added rounds twice, which is outside the bound where the two nearly cancel."""
    T = x.shape[0]
    y = x @ w if bias is None else torch.addmm(bias, x, w)
    D = w.shape[1] // (qheads + 2 * kvheads)
    q, k, v = torch.split(y, [qheads * D, kvheads * D, kvheads * D], dim=1)
    q = q.reshape(T, qheads, D)
    k = k.reshape(T, kvheads, D)
    v = v.reshape(T, kvheads, D)
    if kvheads != qheads:
        rep = qheads // kvheads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    return q, k, v


@contextlib.contextmanager
def fp32_reductions() -> Iterator[None]:
    """16-bit GEMMs reduce in FP32, as the baselines' accuracy models say (class `acc`): torch
    lets cuBLAS round split-K partial sums to bf16/fp16 by default, which no model covers."""
    m = torch.backends.cuda.matmul
    saved = (m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction)
    m.allow_bf16_reduced_precision_reduction = False
    m.allow_fp16_reduced_precision_reduction = False
    try:
        yield
    finally:
        m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction = saved


def run_autograd(
    inputs,  # blockattn.cases.inputs.Inputs
    variant: str,
    attention,  # (q, k, v, offsets, scale) -> o
) -> dict[str, torch.Tensor]:
    """Drive `attention` through the three variants; rotary/projection in the input dtype,
    every GEMM (forward and backward) reducing in FP32."""
    with fp32_reductions():
        return _run_autograd(inputs, variant, attention)


def _run_autograd(inputs, variant: str, attention) -> dict[str, torch.Tensor]:
    spec = inputs.spec
    scale = spec.effective_scale
    block = getattr(spec, "block_size", BLOCK)
    if variant == "projection":
        x = inputs.x.detach().clone().requires_grad_(True)
        w = inputs.w.detach().clone().requires_grad_(True)
        b = inputs.bias.detach().clone().requires_grad_(True)
        q, k, v = split_projection(x, w, b, inputs.qheads, inputs.kvheads)
        q, k = rotary(q, inputs.sinu_pos), rotary(k, inputs.sinu_pos)
        if spec.rotate_v:
            v = rotary(v, inputs.sinu_pos)
        o = attention(q, k, v, inputs.offsets, scale, block)
        dx, dw, db = torch.autograd.grad(o, (x, w, b), inputs.grad_out, allow_unused=True)
        return {"O": o.detach(), "dX": _z(dx, x), "dW": _z(dw, w), "dbias": _z(db, b)}
    q = inputs.q.detach().clone().requires_grad_(True)
    k = inputs.k.detach().clone().requires_grad_(True)
    v = inputs.v.detach().clone().requires_grad_(True)
    qq, kk, vv = q, k, v
    if variant == "rotary":
        qq, kk = rotary(q, inputs.sinu_pos), rotary(k, inputs.sinu_pos)
        if spec.rotate_v:
            vv = rotary(v, inputs.sinu_pos)
    o = attention(qq, kk, vv, inputs.offsets, scale, block)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), inputs.grad_out, allow_unused=True)
    return {"O": o.detach(), "dQ": _z(dq, q), "dK": _z(dk, k), "dV": _z(dv, v)}


def kernel_from(attention):
    """A kernel callable with `block_attention`'s signature from a baseline's
    `attention(q, k, v, offsets, scale, block)`: rotary applied outside in the input dtype (as
    `run_autograd` does), called on the caller's tensors (the contract battery)."""

    def kernel(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v, max_seq_len=None):
        del max_seq_len  # a hint for kernels that size grids by it; the baselines need none
        if sinu_pos is not None:
            q, k = rotary(q, sinu_pos), rotary(k, sinu_pos)
            if rotate_v:
                v = rotary(v, sinu_pos)
        return attention(q, k, v, offsets, scale, block_size)

    return kernel


def _z(g: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if g is None else g.detach()
