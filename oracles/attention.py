"""FP64 reference for fixed-block jagged self-attention (optionally with fused rotary).

Layout: every block (at most `block_size` consecutive tokens of one sequence, counted from the
sequence start) becomes one padded `(H, block_size, D)` tile. The block layout is computed once
with torch index arithmetic on the (small) CPU copy of `offsets`; tiles are then gathered,
processed with batched matmuls and scattered back chunk by chunk so the production shape fits in
GPU memory. Blocks are stored in token order, so the valid tokens of a run of blocks form one
contiguous token range: scattering back is a slice assignment (padded rows are dropped).
"""

from __future__ import annotations

import torch
from torch import Tensor

from oracles import _validate as val
from oracles.rotary import _rotate, _rotate_backward, _split_sinu

F64 = torch.float64

# Memory budget for the FP64 temporaries of one chunk. 1 GiB keeps the production shape
# (~22.9k blocks, H=4, D=128) to ~100 chunks: few enough launches, small next to the FP64
# outputs (3 x 5.9 GB for the backward).
DEFAULT_CHUNK_BYTES = 1 << 30


def max_blocks_per_chunk(H: int, D: int, block_size: int, budget_bytes: int) -> int:
    """Blocks per chunk so that the FP64 temporaries stay within `budget_bytes`.

    Per block: 8 token tiles (q, k, v, dO, O/dq, dk, dv, rotary tile) of H*bs*D, 4 score tiles
    (S, P, dP, dS) of H*bs*bs, 8 bytes each, x2 for the temporaries autograd-free torch ops
    materialise (masked_fill, products).
    """
    per_block = 2 * 8 * (8 * H * block_size * D + 4 * H * block_size * block_size)
    return max(1, budget_bytes // max(per_block, 1))


def block_layout(offsets_cpu: Tensor, block_size: int) -> tuple[Tensor, Tensor]:
    """(start, n_valid) int64 CPU tensors, one entry per block, in token order.

    Vectorised: no Python loop per sequence or per block. Zero-length sequences have no blocks.
    """
    lengths = offsets_cpu[1:] - offsets_cpu[:-1]
    n_blocks = (lengths + block_size - 1) // block_size
    total = int(n_blocks.sum())
    seq = torch.repeat_interleave(torch.arange(lengths.numel()), n_blocks)
    first_block = torch.cumsum(n_blocks, 0) - n_blocks
    j = torch.arange(total) - first_block[seq]  # block index within its sequence
    start = offsets_cpu[:-1][seq] + j * block_size
    n_valid = torch.clamp(lengths[seq] - j * block_size, max=block_size)
    return start, n_valid


def masked_softmax(scores: Tensor, valid: Tensor) -> Tensor:
    """Softmax over the last dim restricted to `valid` (broadcastable bool) entries.

    Rows with no valid entry give all zeros instead of NaN (exp(-inf - -inf) would be NaN).
    Max-subtraction keeps rows of hugely negative/positive scores finite.
    """
    s = scores.masked_fill(~valid, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)  # masked entries: exp(-inf) = 0
    denom = e.sum(dim=-1, keepdim=True)
    return e / torch.where(denom > 0, denom, torch.ones_like(denom))


class _Tiles:
    """Gathers/scatters one chunk of blocks between (T, H, D) and (n, H, bs, D) FP64 tiles."""

    def __init__(self, start: Tensor, n_valid: Tensor, block_size: int, device: torch.device):
        ar = torch.arange(block_size, device=device)
        start_d = start.to(device)
        self.valid = ar[None, :] < n_valid.to(device)[:, None]  # (n, bs)
        # Padded slots read the block's first token (always valid) so gathers stay in range;
        # their values are zeroed right after.
        self.idx = torch.where(self.valid, start_d[:, None] + ar[None, :], start_d[:, None])
        self.t0 = int(start[0])
        self.t1 = int(start[-1] + n_valid[-1])

    def gather(self, x: Tensor) -> Tensor:
        """(T, H, D) any float dtype -> (n, H, bs, D) float64, padded rows zero."""
        t = x[self.idx].to(F64)  # (n, bs, H, D): upcast per chunk, not the whole tensor
        t = t.masked_fill(~self.valid[:, :, None, None], 0.0)
        return t.permute(0, 2, 1, 3)

    def gather_sinu(self, sinu_pos: Tensor) -> Tensor:
        """(T, D) -> (n, 1, bs, D) float64 (broadcasts over heads)."""
        return sinu_pos[self.idx].to(F64)[:, None]

    def scatter(self, out: Tensor, tile: Tensor) -> None:
        """Write the valid rows of (n, H, bs, D) into out[t0:t1] (contiguous, in order)."""
        out[self.t0 : self.t1] = tile.permute(0, 2, 1, 3)[self.valid]


def _run(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    offsets: Tensor,
    grad_out: Tensor | None,
    sinu_pos: Tensor | None,
    rotate_v: bool,
    block_size: object,
    scale: object,
    max_blocks: int | None,
) -> Tensor | tuple[Tensor, Tensor, Tensor]:
    q, k, v = val.check_qkv(q, k, v)
    T, H, D = q.shape
    if grad_out is not None:
        val.check_float_tensor(grad_out, "grad_out", 3)
        if grad_out.shape != q.shape:
            raise ValueError(
                f"grad_out must have the shape of q {tuple(q.shape)}, got {tuple(grad_out.shape)}"
            )
    if sinu_pos is not None:
        val.check_sinu_pos(sinu_pos, T, D)
    device = val.check_same_device(
        q=q, k=k, v=v, offsets=offsets, grad_out=grad_out, sinu_pos=sinu_pos
    )
    bs = val.check_block_size(block_size)
    sc = val.check_scale(scale, D)
    if max_blocks is None:
        max_blocks = max_blocks_per_chunk(H, D, bs, DEFAULT_CHUNK_BYTES)
    max_blocks = val.check_positive_int(max_blocks, "max_blocks_per_chunk")
    off = val.check_offsets(offsets, T)

    start, n_valid = block_layout(off, bs)
    outs = [torch.zeros(T, H, D, dtype=F64, device=device)]
    if grad_out is not None:
        outs += [torch.zeros(T, H, D, dtype=F64, device=device) for _ in range(2)]

    for c0 in range(0, start.numel(), max_blocks):
        tiles = _Tiles(start[c0 : c0 + max_blocks], n_valid[c0 : c0 + max_blocks], bs, device)
        qt, kt, vt = tiles.gather(q), tiles.gather(k), tiles.gather(v)
        if sinu_pos is not None:
            sin, cos = _split_sinu(tiles.gather_sinu(sinu_pos))
            qt, kt = _rotate(qt, sin, cos), _rotate(kt, sin, cos)
            if rotate_v:
                vt = _rotate(vt, sin, cos)
        key_valid = tiles.valid[:, None, None, :]  # (n, 1, 1, bs): mask keys, not queries
        p = masked_softmax(sc * (qt @ kt.transpose(-1, -2)), key_valid)
        if grad_out is None:
            tiles.scatter(outs[0], p @ vt)
            continue
        # Closed-form backward (not autograd). Padded dO rows are zero, so padded queries
        # contribute nothing to dK/dV; P is zero on padded keys, so padded K/V rows get no
        # influence on dQ and are never scattered back.
        dot = tiles.gather(grad_out)
        dv = p.transpose(-1, -2) @ dot
        dp = dot @ vt.transpose(-1, -2)
        di = (p * dp).sum(dim=-1, keepdim=True)
        ds = p * (dp - di)
        dq = sc * (ds @ kt)
        dk = sc * (ds.transpose(-1, -2) @ qt)
        if sinu_pos is not None:  # gradients w.r.t. the UN-rotated inputs
            dq, dk = _rotate_backward(dq, sin, cos), _rotate_backward(dk, sin, cos)
            if rotate_v:
                dv = _rotate_backward(dv, sin, cos)
        for o, t in zip(outs, (dq, dk, dv), strict=True):
            tiles.scatter(o, t)
    return outs[0] if grad_out is None else (outs[0], outs[1], outs[2])


def block_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    offsets: Tensor,
    *,
    block_size: int = 64,
    scale: float | None = None,
    max_blocks_per_chunk: int | None = None,
) -> Tensor:
    """FP64 block attention output (T, H, D) on the input's device."""
    return _run(q, k, v, offsets, None, None, True, block_size, scale, max_blocks_per_chunk)


def block_attention_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    offsets: Tensor,
    grad_out: Tensor,
    *,
    block_size: int = 64,
    scale: float | None = None,
    max_blocks_per_chunk: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Closed-form FP64 (dq, dk, dv) of block attention for upstream gradient `grad_out`."""
    if grad_out is None:
        raise TypeError("grad_out must be a torch.Tensor, got NoneType")
    return _run(q, k, v, offsets, grad_out, None, True, block_size, scale, max_blocks_per_chunk)


def rotary_block_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    offsets: Tensor,
    sinu_pos: Tensor,
    *,
    rotate_v: bool = True,
    block_size: int = 64,
    scale: float | None = None,
    max_blocks_per_chunk: int | None = None,
) -> Tensor:
    """FP64 block attention of rotary(q), rotary(k), rotary(v) (v only when rotate_v)."""
    if sinu_pos is None:
        raise TypeError("sinu_pos must be a torch.Tensor, got NoneType")
    return _run(
        q, k, v, offsets, None, sinu_pos, bool(rotate_v), block_size, scale, max_blocks_per_chunk
    )


def rotary_block_attention_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    offsets: Tensor,
    sinu_pos: Tensor,
    grad_out: Tensor,
    *,
    rotate_v: bool = True,
    block_size: int = 64,
    scale: float | None = None,
    max_blocks_per_chunk: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Closed-form FP64 (dq, dk, dv) w.r.t. the UN-rotated q, k, v."""
    if sinu_pos is None:
        raise TypeError("sinu_pos must be a torch.Tensor, got NoneType")
    if grad_out is None:
        raise TypeError("grad_out must be a torch.Tensor, got NoneType")
    return _run(
        q,
        k,
        v,
        offsets,
        grad_out,
        sinu_pos,
        bool(rotate_v),
        block_size,
        scale,
        max_blocks_per_chunk,
    )
