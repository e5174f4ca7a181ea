"""Triton kernels for jagged block-diagonal attention, with optional fused rotary.

Reads top-down: interpreter shims and numeric helpers, tile loaders, the forward kernel, the
backward kernel, launchers. Autograd and custom-op registration live in `blockattn.ops`.

Design (one tile per (block, head)):
- A Q tile meets exactly one K/V tile, so S = QK^T is formed once and softmax needs no online
  correction; no logsumexp is stored. The backward recomputes P from q, k and forms
  Di = rowsum(P * dP) in-tile: no preprocessing launch, no atomics, bitwise deterministic.
- Persistent grid: a fixed number of programs strides over the tile table (blockattn.kernels.tiles)
  in round-robin order; tiles cost about the same, so each program gets an equal share.
- Accuracy: scores, softmax statistics and all accumulators are FP32. The FP32 values that must
  enter a tensor-core MMA in 16-bit (P, dS, and rotated q/k/v) are split into a high half and a
  low half in the input dtype, and the low half goes through extra MMAs. That carries ~16
  mantissa bits instead of 8 (bf16), so the only rounding left that matters is the final store.
  The kernel is memory-bound, so the extra MMAs ride in the shadow of the loads.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from blockattn.kernels.tiles import TileTable

# The interpreter runs the same kernel source on CPU tensors. It differs from the GPU in two ways
# that matter here, each shimmed below and only under the interpreter:
# - its tl.dot silently returns garbage for bf16 operands (triton issue 11584): we upcast the
#   operands to fp32 first, which is exact for bf16/fp16 values;
# - its fp32 -> bf16 cast truncates instead of rounding to nearest even: we round the fp32 bits
#   ourselves first, after which the truncating cast is exact.
INTERPRET: bool = os.environ.get("TRITON_INTERPRET", "0") == "1"

LOG2E = 1.4426950408889634


# ----------------------------------------------------------------------------- helpers


@triton.jit
def _round_to(x, DT: tl.constexpr, IS_BF16: tl.constexpr, INTERPRET: tl.constexpr):
    """fp32 -> DT with round-to-nearest-even on every backend."""
    if INTERPRET and IS_BF16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        x = tl.where(x != x, x, bits.to(tl.float32, bitcast=True))  # keep NaN payloads NaN
    return x.to(DT)


@triton.jit
def _split(x, DT: tl.constexpr, IS_BF16: tl.constexpr, INTERPRET: tl.constexpr):
    """x (fp32) ~= hi + lo with hi, lo in DT: hi carries the top bits, lo the next ones."""
    hi = _round_to(x, DT, IS_BF16, INTERPRET)
    lo = _round_to(x - hi.to(tl.float32), DT, IS_BF16, INTERPRET)
    return hi, lo


@triton.jit
def _mma(a, b, acc, IEEE: tl.constexpr, INTERPRET: tl.constexpr):
    """acc + a @ b with fp32 accumulation."""
    if INTERPRET:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    elif IEEE:
        return tl.dot(a, b, acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _mma_split(
    a_hi,
    a_lo,
    b_hi,
    b_lo,
    acc,
    A_LO: tl.constexpr,
    B_LO: tl.constexpr,
    IEEE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    """acc + (a_hi + a_lo) @ (b_hi + b_lo), dropping the lo @ lo term (below fp32 noise)."""
    if A_LO:
        acc = _mma(a_lo, b_hi, acc, IEEE, INTERPRET)
    if B_LO:
        acc = _mma(a_hi, b_lo, acc, IEEE, INTERPRET)
    return _mma(a_hi, b_hi, acc, IEEE, INTERPRET)


@triton.jit
def _rotate(x, sin, cos, CONJ: tl.constexpr, BLOCK: tl.constexpr, HALF: tl.constexpr):
    """Rotary on interleaved pairs (x[2i], x[2i+1]) by angle i; CONJ applies the transpose."""
    x0, x1 = tl.split(tl.reshape(x, (BLOCK, HALF, 2)))
    if CONJ:
        y0 = x0 * cos + x1 * sin
        y1 = x1 * cos - x0 * sin
    else:
        y0 = x0 * cos - x1 * sin
        y1 = x1 * cos + x0 * sin
    return tl.reshape(tl.join(y0, y1), (BLOCK, 2 * HALF))


@triton.jit
def _tile_ptrs(base, tok, h, stride_t, stride_h, cols):
    # int64 token index * stride: safe for T*H*D beyond 2^31 elements.
    return base + tok.to(tl.int64)[:, None] * stride_t + h.to(tl.int64) * stride_h + cols[None, :]


@triton.jit
def _load_operand(
    base,
    tok,
    h,
    stride_t,
    stride_h,
    cols,
    row_ok,
    sin,
    cos,
    ROTATE: tl.constexpr,
    DT: tl.constexpr,
    IS_BF16: tl.constexpr,
    SPLIT: tl.constexpr,
    BLOCK: tl.constexpr,
    HALF: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    """Load a (BLOCK, D) tile; rotated tiles come back as hi/lo halves in DT."""
    x = tl.load(_tile_ptrs(base, tok, h, stride_t, stride_h, cols), mask=row_ok[:, None], other=0.0)
    if ROTATE:
        xr = _rotate(x.to(tl.float32), sin, cos, False, BLOCK, HALF)
        if SPLIT:
            hi, lo = _split(xr, DT, IS_BF16, INTERPRET)
        else:
            hi = xr.to(DT)
            lo = hi
        return hi, lo
    return x, x


@triton.jit
def _load_sinu(
    SIN, tok, stride_st, row_ok, ROTARY: tl.constexpr, BLOCK: tl.constexpr, HALF: tl.constexpr
):
    """(BLOCK, HALF) fp32 sin and cos of the block's tokens (zeros when ROTARY is off)."""
    sin = tl.zeros((BLOCK, HALF), dtype=tl.float32)
    cos = sin
    if ROTARY:
        sp = SIN + tok.to(tl.int64)[:, None] * stride_st + tl.arange(0, HALF)[None, :]
        sin = tl.load(sp, mask=row_ok[:, None], other=0.0).to(tl.float32)
        cos = tl.load(sp + HALF, mask=row_ok[:, None], other=0.0).to(tl.float32)
    return sin, cos


@triton.jit
def _scores_to_probs(
    q_hi,
    q_lo,
    k_hi,
    k_lo,
    n,
    keys,
    qk_scale,
    LO: tl.constexpr,
    IEEE: tl.constexpr,
    INTERPRET: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """P = softmax over the n valid keys of scale * q k^T, normalised in fp32."""
    s = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    s = _mma_split(q_hi, q_lo, tl.trans(k_hi), tl.trans(k_lo), s, LO, LO, IEEE, INTERPRET)
    s = tl.where((keys < n)[None, :], s * qk_scale, float("-inf"))  # log2 domain
    m = tl.max(s, axis=1)
    p = tl.math.exp2(s - m[:, None])
    return p / tl.sum(p, axis=1)[:, None]


# ----------------------------------------------------------------------------- forward


@triton.jit
def _fwd_tile(
    tile,
    Q,
    K,
    V,
    O,
    SIN,
    tile_start,
    tile_len,
    n_tiles,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    stride_st,
    qk_scale,
    H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK: tl.constexpr,
    ROTARY: tl.constexpr,
    ROTATE_V: tl.constexpr,
    SPLIT: tl.constexpr,
    IS_BF16: tl.constexpr,
    IEEE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    DT: tl.constexpr = Q.dtype.element_ty
    HALF: tl.constexpr = HEAD_DIM // 2
    rows = tl.arange(0, BLOCK)
    cols = tl.arange(0, HEAD_DIM)
    blk = tile // H
    h = tile % H
    n = tl.load(tile_len + blk, mask=tile < n_tiles, other=0)
    if n > 0:
        tok = tl.load(tile_start + blk) + rows
        row_ok = rows < n
        sin, cos = _load_sinu(SIN, tok, stride_st, row_ok, ROTARY, BLOCK, HALF)
        q_hi, q_lo = _load_operand(
            Q,
            tok,
            h,
            stride_qt,
            stride_qh,
            cols,
            row_ok,
            sin,
            cos,
            ROTARY,
            DT,
            IS_BF16,
            SPLIT,
            BLOCK,
            HALF,
            INTERPRET,
        )
        k_hi, k_lo = _load_operand(
            K,
            tok,
            h,
            stride_kt,
            stride_kh,
            cols,
            row_ok,
            sin,
            cos,
            ROTARY,
            DT,
            IS_BF16,
            SPLIT,
            BLOCK,
            HALF,
            INTERPRET,
        )
        v_hi, v_lo = _load_operand(
            V,
            tok,
            h,
            stride_vt,
            stride_vh,
            cols,
            row_ok,
            sin,
            cos,
            ROTATE_V,
            DT,
            IS_BF16,
            SPLIT,
            BLOCK,
            HALF,
            INTERPRET,
        )
        p = _scores_to_probs(
            q_hi, q_lo, k_hi, k_lo, n, rows, qk_scale, ROTARY and SPLIT, IEEE, INTERPRET, BLOCK
        )
        acc = tl.zeros((BLOCK, HEAD_DIM), dtype=tl.float32)
        if SPLIT:
            p_hi, p_lo = _split(p, DT, IS_BF16, INTERPRET)
            acc = _mma_split(p_hi, p_lo, v_hi, v_lo, acc, True, ROTATE_V, IEEE, INTERPRET)
        else:
            acc = _mma(p.to(DT), v_hi, acc, IEEE, INTERPRET)
        o_ptrs = _tile_ptrs(O, tok, h, stride_ot, stride_oh, cols)
        tl.store(o_ptrs, _round_to(acc, DT, IS_BF16, INTERPRET), mask=row_ok[:, None])


@triton.jit
def _fwd_kernel(
    Q,
    K,
    V,
    O,
    SIN,
    tile_start,
    tile_len,
    n_tiles,
    n_programs,
    tiles_per_program,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    stride_st,
    qk_scale,
    H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK: tl.constexpr,
    ROTARY: tl.constexpr,
    ROTATE_V: tl.constexpr,
    SPLIT: tl.constexpr,
    IS_BF16: tl.constexpr,
    IEEE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    pid = tl.program_id(0)
    if INTERPRET:
        # One tile per program: the interpreter cannot take a runtime loop bound under
        # numpy >= 2.4 (it converts a 1-element array to int). Same tile code as the GPU path.
        _fwd_tile(
            pid,
            Q,
            K,
            V,
            O,
            SIN,
            tile_start,
            tile_len,
            n_tiles,
            stride_qt,
            stride_qh,
            stride_kt,
            stride_kh,
            stride_vt,
            stride_vh,
            stride_ot,
            stride_oh,
            stride_st,
            qk_scale,
            H,
            HEAD_DIM,
            BLOCK,
            ROTARY,
            ROTATE_V,
            SPLIT,
            IS_BF16,
            IEEE,
            INTERPRET,
        )
    else:
        for i in tl.range(0, tiles_per_program):
            # Round-robin: programs pid, pid+1, ... take neighbouring tiles (a block's heads).
            _fwd_tile(
                pid + i * n_programs,
                Q,
                K,
                V,
                O,
                SIN,
                tile_start,
                tile_len,
                n_tiles,
                stride_qt,
                stride_qh,
                stride_kt,
                stride_kh,
                stride_vt,
                stride_vh,
                stride_ot,
                stride_oh,
                stride_st,
                qk_scale,
                H,
                HEAD_DIM,
                BLOCK,
                ROTARY,
                ROTATE_V,
                SPLIT,
                IS_BF16,
                IEEE,
                INTERPRET,
            )


# ----------------------------------------------------------------------------- backward


@triton.jit
def _bwd_tile(
    tile,
    Q,
    K,
    V,
    DO,
    DQ,
    DK,
    DV,
    SIN,
    tile_start,
    tile_len,
    n_tiles,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_dot,
    stride_doh,
    stride_dqt,
    stride_dqh,
    stride_dkt,
    stride_dkh,
    stride_dvt,
    stride_dvh,
    stride_st,
    qk_scale,
    sm_scale,
    H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK: tl.constexpr,
    ROTARY: tl.constexpr,
    ROTATE_V: tl.constexpr,
    SPLIT: tl.constexpr,
    IS_BF16: tl.constexpr,
    IEEE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    DT: tl.constexpr = Q.dtype.element_ty
    HALF: tl.constexpr = HEAD_DIM // 2
    rows = tl.arange(0, BLOCK)
    cols = tl.arange(0, HEAD_DIM)
    blk = tile // H
    h = tile % H
    n = tl.load(tile_len + blk, mask=tile < n_tiles, other=0)
    if n > 0:
        tok = tl.load(tile_start + blk) + rows
        row_ok = rows < n
        sin, cos = _load_sinu(SIN, tok, stride_st, row_ok, ROTARY, BLOCK, HALF)
        q_hi, q_lo = _load_operand(
            Q,
            tok,
            h,
            stride_qt,
            stride_qh,
            cols,
            row_ok,
            sin,
            cos,
            ROTARY,
            DT,
            IS_BF16,
            SPLIT,
            BLOCK,
            HALF,
            INTERPRET,
        )
        k_hi, k_lo = _load_operand(
            K,
            tok,
            h,
            stride_kt,
            stride_kh,
            cols,
            row_ok,
            sin,
            cos,
            ROTARY,
            DT,
            IS_BF16,
            SPLIT,
            BLOCK,
            HALF,
            INTERPRET,
        )
        v_hi, v_lo = _load_operand(
            V,
            tok,
            h,
            stride_vt,
            stride_vh,
            cols,
            row_ok,
            sin,
            cos,
            ROTATE_V,
            DT,
            IS_BF16,
            SPLIT,
            BLOCK,
            HALF,
            INTERPRET,
        )
        do = tl.load(
            _tile_ptrs(DO, tok, h, stride_dot, stride_doh, cols), mask=row_ok[:, None], other=0.0
        )
        QK_LO: tl.constexpr = ROTARY and SPLIT
        V_LO: tl.constexpr = ROTATE_V and SPLIT
        p = _scores_to_probs(
            q_hi, q_lo, k_hi, k_lo, n, rows, qk_scale, QK_LO, IEEE, INTERPRET, BLOCK
        )
        # dP = dO V^T; Di = rowsum(P * dP) in-tile (no stored O, no preprocessing pass).
        dp = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        dp = _mma_split(do, do, tl.trans(v_hi), tl.trans(v_lo), dp, False, V_LO, IEEE, INTERPRET)
        di = tl.sum(p * dp, axis=1)
        ds = p * (dp - di[:, None])  # padded query rows have dO = 0, so dS rows are 0
        dv = tl.zeros((BLOCK, HEAD_DIM), dtype=tl.float32)
        dq = tl.zeros((BLOCK, HEAD_DIM), dtype=tl.float32)
        dk = tl.zeros((BLOCK, HEAD_DIM), dtype=tl.float32)
        if SPLIT:
            p_hi, p_lo = _split(p, DT, IS_BF16, INTERPRET)
            ds_hi, ds_lo = _split(ds, DT, IS_BF16, INTERPRET)
            dv = _mma_split(
                tl.trans(p_hi), tl.trans(p_lo), do, do, dv, True, False, IEEE, INTERPRET
            )
            dq = _mma_split(ds_hi, ds_lo, k_hi, k_lo, dq, True, QK_LO, IEEE, INTERPRET)
            dk = _mma_split(
                tl.trans(ds_hi), tl.trans(ds_lo), q_hi, q_lo, dk, True, QK_LO, IEEE, INTERPRET
            )
        else:
            dv = _mma(tl.trans(p.to(DT)), do, dv, IEEE, INTERPRET)
            dq = _mma(ds.to(DT), k_hi, dq, IEEE, INTERPRET)
            dk = _mma(tl.trans(ds.to(DT)), q_hi, dk, IEEE, INTERPRET)
        dq = dq * sm_scale
        dk = dk * sm_scale
        if ROTARY:  # gradients w.r.t. the un-rotated inputs: the transpose rotation
            dq = _rotate(dq, sin, cos, True, BLOCK, HALF)
            dk = _rotate(dk, sin, cos, True, BLOCK, HALF)
        if ROTATE_V:
            dv = _rotate(dv, sin, cos, True, BLOCK, HALF)
        m = row_ok[:, None]
        tl.store(
            _tile_ptrs(DQ, tok, h, stride_dqt, stride_dqh, cols),
            _round_to(dq, DT, IS_BF16, INTERPRET),
            mask=m,
        )
        tl.store(
            _tile_ptrs(DK, tok, h, stride_dkt, stride_dkh, cols),
            _round_to(dk, DT, IS_BF16, INTERPRET),
            mask=m,
        )
        tl.store(
            _tile_ptrs(DV, tok, h, stride_dvt, stride_dvh, cols),
            _round_to(dv, DT, IS_BF16, INTERPRET),
            mask=m,
        )


@triton.jit
def _bwd_kernel(
    Q,
    K,
    V,
    DO,
    DQ,
    DK,
    DV,
    SIN,
    tile_start,
    tile_len,
    n_tiles,
    n_programs,
    tiles_per_program,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_dot,
    stride_doh,
    stride_dqt,
    stride_dqh,
    stride_dkt,
    stride_dkh,
    stride_dvt,
    stride_dvh,
    stride_st,
    qk_scale,
    sm_scale,
    H: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK: tl.constexpr,
    ROTARY: tl.constexpr,
    ROTATE_V: tl.constexpr,
    SPLIT: tl.constexpr,
    IS_BF16: tl.constexpr,
    IEEE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    pid = tl.program_id(0)
    if INTERPRET:  # one tile per program, as in _fwd_kernel
        _bwd_tile(
            pid,
            Q,
            K,
            V,
            DO,
            DQ,
            DK,
            DV,
            SIN,
            tile_start,
            tile_len,
            n_tiles,
            stride_qt,
            stride_qh,
            stride_kt,
            stride_kh,
            stride_vt,
            stride_vh,
            stride_dot,
            stride_doh,
            stride_dqt,
            stride_dqh,
            stride_dkt,
            stride_dkh,
            stride_dvt,
            stride_dvh,
            stride_st,
            qk_scale,
            sm_scale,
            H,
            HEAD_DIM,
            BLOCK,
            ROTARY,
            ROTATE_V,
            SPLIT,
            IS_BF16,
            IEEE,
            INTERPRET,
        )
    else:
        for i in tl.range(0, tiles_per_program):
            _bwd_tile(
                pid + i * n_programs,
                Q,
                K,
                V,
                DO,
                DQ,
                DK,
                DV,
                SIN,
                tile_start,
                tile_len,
                n_tiles,
                stride_qt,
                stride_qh,
                stride_kt,
                stride_kh,
                stride_vt,
                stride_vh,
                stride_dot,
                stride_doh,
                stride_dqt,
                stride_dqh,
                stride_dkt,
                stride_dkh,
                stride_dvt,
                stride_dvh,
                stride_st,
                qk_scale,
                sm_scale,
                H,
                HEAD_DIM,
                BLOCK,
                ROTARY,
                ROTATE_V,
                SPLIT,
                IS_BF16,
                IEEE,
                INTERPRET,
            )


# ----------------------------------------------------------------------------- launchers

_SPLIT_DTYPES = (torch.bfloat16, torch.float16)
# Programs per SM for the persistent grid: enough resident tiles to keep loads in flight.
_PROGRAMS_PER_SM = {"fwd": 4, "bwd": 2}
_NUM_WARPS = {"fwd": 4, "bwd": 8}


def _grid_size(n_tiles: int, device: torch.device, which: str) -> int:
    if n_tiles == 0:
        return 0
    if INTERPRET:
        return n_tiles  # one tile per program (see _fwd_kernel)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return min(n_tiles, sms * _PROGRAMS_PER_SM[which])


def _flags(q: torch.Tensor, sinu_pos: torch.Tensor | None, rotate_v: bool) -> dict:
    return dict(
        ROTARY=sinu_pos is not None,
        ROTATE_V=sinu_pos is not None and rotate_v,
        SPLIT=q.dtype in _SPLIT_DTYPES,
        IS_BF16=q.dtype == torch.bfloat16,
        IEEE=q.dtype == torch.float32,  # fp32 inputs: full-precision MMAs, no tf32
        INTERPRET=INTERPRET,
    )


def attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    table: TileTable,
    sinu_pos: torch.Tensor | None,
    scale: float,
    block_size: int,
    rotate_v: bool,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Forward launch on validated inputs (last dim contiguous). Returns O (T, H, D)."""
    T, H, D = q.shape
    o = torch.empty((T, H, D), dtype=q.dtype, device=q.device) if out is None else out
    n_tiles = table.n_slots * H
    grid = _grid_size(n_tiles, q.device, "fwd")
    if grid == 0:
        return o
    sin = sinu_pos if sinu_pos is not None else q  # dummy pointer when ROTARY is off
    _fwd_kernel[(grid,)](
        q,
        k,
        v,
        o,
        sin,
        table.start,
        table.length,
        n_tiles,
        grid,
        triton.cdiv(n_tiles, grid),
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        o.stride(0),
        o.stride(1),
        sin.stride(0),
        scale * LOG2E,
        H=H,
        HEAD_DIM=D,
        BLOCK=max(16, triton.next_power_of_2(block_size)),
        num_warps=_NUM_WARPS["fwd"],
        **_flags(q, sinu_pos, rotate_v),
    )
    return o


def attention_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
    table: TileTable,
    sinu_pos: torch.Tensor | None,
    scale: float,
    block_size: int,
    rotate_v: bool,
    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward launch. Returns (dq, dk, dv) w.r.t. the un-rotated q, k, v."""
    T, H, D = q.shape
    if grads is None:
        grads = tuple(torch.empty((T, H, D), dtype=q.dtype, device=q.device) for _ in range(3))
    dq, dk, dv = grads
    n_tiles = table.n_slots * H
    grid = _grid_size(n_tiles, q.device, "bwd")
    if grid == 0:
        return dq, dk, dv
    sin = sinu_pos if sinu_pos is not None else q
    _bwd_kernel[(grid,)](
        q,
        k,
        v,
        grad_out,
        dq,
        dk,
        dv,
        sin,
        table.start,
        table.length,
        n_tiles,
        grid,
        triton.cdiv(n_tiles, grid),
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        grad_out.stride(0),
        grad_out.stride(1),
        dq.stride(0),
        dq.stride(1),
        dk.stride(0),
        dk.stride(1),
        dv.stride(0),
        dv.stride(1),
        sin.stride(0),
        scale * LOG2E,
        scale,
        H=H,
        HEAD_DIM=D,
        BLOCK=max(16, triton.next_power_of_2(block_size)),
        num_warps=_NUM_WARPS["bwd"],
        **_flags(q, sinu_pos, rotate_v),
    )
    return dq, dk, dv
