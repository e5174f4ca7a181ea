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
- Cancellation in the backward (CENTRED, on by default): dS = P * (dP - Di) subtracts two large,
  nearly equal fp32 numbers when V's rows nearly agree or the softmax is saturated. dP is formed
  from V minus one row vector per block and Di is summed in two passes, both exact identities
  (see _bwd_tile), so the fp32 rounding left is relative to dP - Di rather than to dP. In fp16,
  dS is split at a power-of-two scale so that its lo half stays in fp16's normal range.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

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
def _mma_split(a_hi, a_lo, b_hi, b_lo, acc, A_LO: tl.constexpr, B_LO: tl.constexpr,
               IEEE: tl.constexpr, INTERPRET: tl.constexpr):
    """acc + (a_hi + a_lo) @ (b_hi + b_lo), dropping lo @ lo (2^-16 relative: below fp32 noise
    of the sum at 16-bit output precision)."""
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
def _tile(base, start, n, h, stride_t, stride_h, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Pointers and row mask of the (BLOCK, HEAD_DIM) tile of head h at tokens [start, start+n).

    Token indices are int64 before the stride multiply: safe for T*H*D beyond 2^31 elements.
    Rows >= n are masked: loads give 0, stores skip them.
    """
    rows = tl.arange(0, BLOCK)
    tok = (start + rows).to(tl.int64)
    ptrs = base + tok[:, None] * stride_t + h * stride_h + tl.arange(0, HEAD_DIM)[None, :]
    return ptrs, (rows < n)[:, None]


@triton.jit
def _load(tile):
    ptrs, mask = tile
    return tl.load(ptrs, mask=mask, other=0.0)


@triton.jit
def _load_sinu(SIN, start, n, stride_st, ROTARY: tl.constexpr, BLOCK: tl.constexpr,
               HALF: tl.constexpr):
    """(BLOCK, HALF) fp32 sin and cos of the block's tokens (zeros when ROTARY is off)."""
    sin = tl.zeros((BLOCK, HALF), dtype=tl.float32)
    cos = sin
    if ROTARY:
        ptrs, mask = _tile(SIN, start, n, start, stride_st, 0, BLOCK, HALF)  # h * 0 = 0
        sin = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
        cos = tl.load(ptrs + HALF, mask=mask, other=0.0).to(tl.float32)
    return sin, cos


@triton.jit
def _operand(x, SIN, start, n, stride_st, ROTATE: tl.constexpr, SPLIT: tl.constexpr,
             IS_BF16: tl.constexpr, BLOCK: tl.constexpr, HALF: tl.constexpr,
             INTERPRET: tl.constexpr):
    """A loaded (BLOCK, D) tile as an MMA operand: rotated tiles come back as hi/lo halves.

    sin/cos are read per operand (L1 hits after the first) so the fp32 tables are never live
    across the whole tile: that is what kept the rotary kernels from spilling.
    """
    if ROTATE:
        sin, cos = _load_sinu(SIN, start, n, stride_st, True, BLOCK, HALF)
        xr = _rotate(x.to(tl.float32), sin, cos, False, BLOCK, HALF)
        if SPLIT:
            hi, lo = _split(xr, x.dtype, IS_BF16, INTERPRET)
        else:
            hi = xr.to(x.dtype)
            lo = hi
        return hi, lo
    return x, x


@triton.jit
def _centred(x, row0, SIN, start, n, stride_st, ROTATE: tl.constexpr, SPLIT: tl.constexpr,
             IS_BF16: tl.constexpr, BLOCK: tl.constexpr, HALF: tl.constexpr,
             INTERPRET: tl.constexpr):
    """A loaded (BLOCK, D) tile minus one row vector m, as hi/lo MMA operand halves.

    Used for V in the backward, where any m subtracted from every row leaves dP - Di unchanged
    (see _bwd_tile); m removes the part that nearly equal rows share from the fp32 dO V^T sums.
    - Rotated tile (fp32 after the rotation): m is the mean of its n valid rows (padded rows
      are 0 and are kept 0), taken before the hi/lo split the rotated tile gets anyway, so no
      MMA is added.
    - Plain tile: m is the block's first row, re-loaded as a (1, D) tile (`row0`, an L1 hit;
      on an H100 a reduction across rows cost more than one more MMA). x - m is exact in fp32
      but not in the input dtype, so it enters as hi + lo: one extra MMA. Padded rows become -m,
      finite, in columns where P is 0.
    """
    if ROTATE:
        sin, cos = _load_sinu(SIN, start, n, stride_st, True, BLOCK, HALF)
        xr = _rotate(x.to(tl.float32), sin, cos, False, BLOCK, HALF)
        m = tl.sum(xr, axis=0) / tl.maximum(n, 1).to(tl.float32)  # padded rows are 0
        xc = tl.where((tl.arange(0, BLOCK) < n)[:, None], xr - m[None, :], 0.0)
    else:
        xc = x.to(tl.float32) - _load(row0).to(tl.float32)
    if SPLIT:
        hi, lo = _split(xc, x.dtype, IS_BF16, INTERPRET)
    else:  # fp32 input: the exact-input (ieee) MMA takes the fp32 tile as is
        hi = xc
        lo = xc
    return hi, lo


@triton.jit
def _pow2_scale(amax, EXP: tl.constexpr):
    """(2^e, 2^-e) with amax * 2^e in [2^EXP, 2^(EXP+1)) for a finite amax > 0; e is clamped to
    [-64, 64] (amax = 0 gives 2^64). Scaling by a power of two is exact."""
    e = EXP + 127 - ((amax.to(tl.uint32, bitcast=True) >> 23) & 0xFF).to(tl.int32)
    e = tl.minimum(tl.maximum(e, -64), 64)
    up = ((e + 127).to(tl.uint32) << 23).to(tl.float32, bitcast=True)
    down = ((127 - e).to(tl.uint32) << 23).to(tl.float32, bitcast=True)
    return up, down


@triton.jit
def _probs(q_hi, q_lo, k_hi, k_lo, n, qk_scale, LO: tl.constexpr, IEEE: tl.constexpr,
           INTERPRET: tl.constexpr, BLOCK: tl.constexpr):
    """P = softmax over the n valid keys of scale * q k^T, normalised in fp32."""
    s = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    s = _mma_split(q_hi, q_lo, tl.trans(k_hi), tl.trans(k_lo), s, LO, LO, IEEE, INTERPRET)
    s = tl.where((tl.arange(0, BLOCK) < n)[None, :], s * qk_scale, float("-inf"))  # log2 domain
    m = tl.max(s, axis=1)
    p = tl.math.exp2(s - m[:, None])
    return p / tl.sum(p, axis=1)[:, None]


@triton.jit
def _store(tile, x, SIN, start, n, stride_st, ROTATE: tl.constexpr, IS_BF16: tl.constexpr,
           BLOCK: tl.constexpr, HALF: tl.constexpr, INTERPRET: tl.constexpr):
    """Store an fp32 tile, first rotated back (transpose rotation) if ROTATE.

    sin/cos are re-read here (an L1/L2 hit) rather than kept live since the loads: two fp32
    (BLOCK, HALF) tiles held across the whole backward cost ~64 registers per thread.
    """
    if ROTATE:
        sin, cos = _load_sinu(SIN, start, n, stride_st, True, BLOCK, HALF)
        x = _rotate(x, sin, cos, True, BLOCK, HALF)
    ptrs, mask = tile
    tl.store(ptrs, _round_to(x, ptrs.dtype.element_ty, IS_BF16, INTERPRET), mask=mask)


# ----------------------------------------------------------------------------- tile lookup


@triton.jit
def _tile_at(tile, tile_start, tile_len, n_tiles, H: tl.constexpr):
    """(head, first token, valid tokens) of tile `tile`; n = 0 past the table (slot padding or
    the persistent loop's overshoot), which masks every load and store of that tile."""
    blk = tile // H
    live = tile < n_tiles
    n = tl.load(tile_len + blk, mask=live, other=0)
    start = tl.load(tile_start + blk, mask=live, other=0)
    return tile % H, start, n


# ----------------------------------------------------------------------------- forward


@triton.jit
def _fwd_tile(h, start, n, Q, K, V, O, SIN,
              stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
              stride_ot, stride_oh, stride_st, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
              ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
              IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr):
    q = _load(_tile(Q, start, n, h, stride_qt, stride_qh, BLOCK, HEAD_DIM))
    k = _load(_tile(K, start, n, h, stride_kt, stride_kh, BLOCK, HEAD_DIM))
    v = _load(_tile(V, start, n, h, stride_vt, stride_vh, BLOCK, HEAD_DIM))
    _fwd_body(q, k, v, h, start, n, O, SIN, stride_ot, stride_oh, stride_st, qk_scale,
              HEAD_DIM, BLOCK, ROTARY, ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET)


@triton.jit
def _fwd_body(q, k, v, h, start, n, O, SIN, stride_ot, stride_oh, stride_st, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
              ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
              IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr):
    """The forward of one tile from its loaded q, k, v (rows >= n zero): also the body of the
    Hopper TMA kernel (blockattn.kernels.attention_hopper), which loads them its own way."""
    HALF: tl.constexpr = HEAD_DIM // 2
    q_hi, q_lo = _operand(q, SIN, start, n, stride_st, ROTARY, SPLIT, IS_BF16,
                          BLOCK, HALF, INTERPRET)
    k_hi, k_lo = _operand(k, SIN, start, n, stride_st, ROTARY, SPLIT, IS_BF16,
                          BLOCK, HALF, INTERPRET)
    p = _probs(q_hi, q_lo, k_hi, k_lo, n, qk_scale, ROTARY and SPLIT, IEEE, INTERPRET, BLOCK)
    # V is rotated only now, after q/k are dead, to keep register pressure down.
    v_hi, v_lo = _operand(v, SIN, start, n, stride_st, ROTATE_V, SPLIT, IS_BF16,
                          BLOCK, HALF, INTERPRET)
    acc = tl.zeros((BLOCK, HEAD_DIM), dtype=tl.float32)
    if SPLIT:
        p_hi, p_lo = _split(p, q.dtype, IS_BF16, INTERPRET)
        acc = _mma_split(p_hi, p_lo, v_hi, v_lo, acc, True, ROTATE_V, IEEE, INTERPRET)
    else:
        acc = _mma(p.to(q.dtype), v_hi, acc, IEEE, INTERPRET)
    _store(_tile(O, start, n, h, stride_ot, stride_oh, BLOCK, HEAD_DIM), acc, SIN, start, n,
           stride_st, False, IS_BF16, BLOCK, HALF, INTERPRET)


@triton.jit
def _fwd_kernel(Q, K, V, O, SIN, tile_start, tile_len, n_tiles, n_programs, tiles_per_program,
                stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                stride_ot, stride_oh, stride_st, qk_scale,
                H: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
                ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
                IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
                PERSISTENT: tl.constexpr, CENTRED: tl.constexpr):
    # CENTRED is read by the backward only; it is here so both kernels take the same _flags.
    pid = tl.program_id(0)
    if PERSISTENT:
        # Branch-free loop body (empty tiles are fully masked) so Triton's software pipeliner
        # can issue the next tile's loads while this one computes. Round-robin: programs pid,
        # pid+1, ... take neighbouring tiles (a block's heads).
        for i in tl.range(0, tiles_per_program):
            h, start, n = _tile_at(pid + i * n_programs, tile_start, tile_len, n_tiles, H)
            _fwd_tile(h, start, n, Q, K, V, O, SIN,
                      stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                      stride_ot, stride_oh, stride_st, qk_scale,
                      HEAD_DIM, BLOCK, ROTARY, ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET)
    else:  # one tile per program (always so under the interpreter): skip empty slots
        h, start, n = _tile_at(pid, tile_start, tile_len, n_tiles, H)
        if n > 0:
            _fwd_tile(h, start, n, Q, K, V, O, SIN,
                      stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                      stride_ot, stride_oh, stride_st, qk_scale,
                      HEAD_DIM, BLOCK, ROTARY, ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET)


# ----------------------------------------------------------------------------- backward


@triton.jit
def _bwd_tile(h, start, n, Q, K, V, DO, DQ, DK, DV, SIN,
              stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
              stride_dot, stride_doh, stride_dqt, stride_dqh, stride_dkt, stride_dkh,
              stride_dvt, stride_dvh, stride_st, qk_scale, sm_scale,
              HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
              ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
              IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
              CENTRED: tl.constexpr):
    q = _load(_tile(Q, start, n, h, stride_qt, stride_qh, BLOCK, HEAD_DIM))
    k = _load(_tile(K, start, n, h, stride_kt, stride_kh, BLOCK, HEAD_DIM))
    v = _load(_tile(V, start, n, h, stride_vt, stride_vh, BLOCK, HEAD_DIM))
    do = _load(_tile(DO, start, n, h, stride_dot, stride_doh, BLOCK, HEAD_DIM))
    _bwd_body(q, k, v, do, h, start, n, V, DQ, DK, DV, SIN, stride_vt, stride_vh,
              stride_dqt, stride_dqh, stride_dkt, stride_dkh, stride_dvt, stride_dvh,
              stride_st, qk_scale, sm_scale,
              HEAD_DIM, BLOCK, ROTARY, ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET, CENTRED)


@triton.jit
def _bwd_body(q, k, v, do, h, start, n, V, DQ, DK, DV, SIN, stride_vt, stride_vh,
              stride_dqt, stride_dqh, stride_dkt, stride_dkh, stride_dvt, stride_dvh,
              stride_st, qk_scale, sm_scale,
              HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
              ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
              IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
              CENTRED: tl.constexpr):
    """The backward of one tile from its loaded q, k, v, dO (rows >= n zero); V is re-read only
    for its first row (centred plain V). Also the body of the Hopper TMA kernel."""
    HALF: tl.constexpr = HEAD_DIM // 2
    QK_LO: tl.constexpr = ROTARY and SPLIT
    V_LO: tl.constexpr = (ROTATE_V or CENTRED) and SPLIT
    # Where the centred plain V is formed (H100, bf16 bwd): before QK^T at D=64 (0.62 vs 0.66 ms
    # after it), after it at D=128 (1.44 vs 1.46 ms). A rotated V always comes after, once q/k
    # are dead, for register pressure.
    V_EARLY: tl.constexpr = CENTRED and not ROTATE_V and HEAD_DIM <= 64
    q_hi, q_lo = _operand(q, SIN, start, n, stride_st, ROTARY, SPLIT, IS_BF16,
                          BLOCK, HALF, INTERPRET)
    k_hi, k_lo = _operand(k, SIN, start, n, stride_st, ROTARY, SPLIT, IS_BF16,
                          BLOCK, HALF, INTERPRET)
    # dP = dO V^T; Di = rowsum(P * dP) in-tile (no stored O, no preprocessing pass).
    # dS = P * (dP - Di) cancels: dP_ij and Di are large and nearly equal when V's rows nearly
    # agree or P is saturated, and their fp32 errors (~ D 2^-24 sum_d |dO_id V_jd| for dP) then
    # dominate dP - Di = dO_i . (V_j - O_i). With CENTRED, both are kept relative to dP - Di:
    # - V minus one row vector m per block (_centred): dP - Di is unchanged, as every row of
    #   P sums to 1, but the MMA now sums dO_i . (V_j - m), small when V's rows nearly agree;
    # - Di in two passes: dP is first shifted by the fp32 Di, then Di is summed again over the
    #   shifted dP. The P-weighted mean is shift-invariant, so the second pass only sees terms
    #   of the size of dP - Di and its rounding (and that of P's row sum) stays relative to them.
    if V_EARLY:
        v_hi, v_lo = _centred(v, _tile(V, start, tl.minimum(n, 1), h, stride_vt, stride_vh, 1,
                                       HEAD_DIM),
                              SIN, start, n, stride_st, False, SPLIT, IS_BF16,
                              BLOCK, HALF, INTERPRET)
    p = _probs(q_hi, q_lo, k_hi, k_lo, n, qk_scale, QK_LO, IEEE, INTERPRET, BLOCK)
    if CENTRED and not V_EARLY:
        v_hi, v_lo = _centred(v, _tile(V, start, tl.minimum(n, 1), h, stride_vt, stride_vh, 1,
                                       HEAD_DIM),
                              SIN, start, n, stride_st, ROTATE_V, SPLIT, IS_BF16,
                              BLOCK, HALF, INTERPRET)
    elif not CENTRED:
        v_hi, v_lo = _operand(v, SIN, start, n, stride_st, ROTATE_V, SPLIT, IS_BF16,
                              BLOCK, HALF, INTERPRET)
    dp = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    dp = _mma_split(do, do, tl.trans(v_hi), tl.trans(v_lo), dp, False, V_LO, IEEE, INTERPRET)
    if CENTRED:  # first pass of Di
        dp = dp - tl.sum(p * dp, axis=1)[:, None]
    ds = p * (dp - tl.sum(p * dp, axis=1)[:, None])  # padded rows: dO = 0, so dS = 0
    # Each gradient is stored as soon as it is complete, so only one (BLOCK, D) fp32
    # accumulator is live at a time.
    acc = tl.zeros((BLOCK, HEAD_DIM), dtype=tl.float32)
    if SPLIT:
        p_hi, p_lo = _split(p, q.dtype, IS_BF16, INTERPRET)
        acc = _mma_split(tl.trans(p_hi), tl.trans(p_lo), do, do, acc, True, False, IEEE,
                         INTERPRET)
    else:
        acc = _mma(tl.trans(p.to(q.dtype)), do, acc, IEEE, INTERPRET)
    _store(_tile(DV, start, n, h, stride_dvt, stride_dvh, BLOCK, HEAD_DIM), acc, SIN, start, n,
           stride_st, ROTATE_V, IS_BF16, BLOCK, HALF, INTERPRET)
    if SPLIT:
        if CENTRED and not IS_BF16:
            # fp16: where dS is small (as it is when dP - Di is) its lo half falls below fp16's
            # normal range and loses its bits. Split dS at a power-of-two scale that puts the
            # tile's max |dS| at 2^14, and fold the inverse (exact) into the store scale.
            ds_up, ds_down = _pow2_scale(tl.max(tl.max(tl.abs(ds), axis=1, keep_dims=True),
                                                axis=0, keep_dims=True), 14)
            ds = ds * ds_up
            sm_scale = sm_scale * ds_down
        ds_hi, ds_lo = _split(ds, q.dtype, IS_BF16, INTERPRET)
    else:
        ds_hi = ds.to(q.dtype)
        ds_lo = ds_hi
    acc = tl.zeros((BLOCK, HEAD_DIM), dtype=tl.float32)
    acc = _mma_split(ds_hi, ds_lo, k_hi, k_lo, acc, SPLIT, QK_LO, IEEE, INTERPRET)
    _store(_tile(DQ, start, n, h, stride_dqt, stride_dqh, BLOCK, HEAD_DIM), acc * sm_scale,
           SIN, start, n, stride_st, ROTARY, IS_BF16, BLOCK, HALF, INTERPRET)
    acc = tl.zeros((BLOCK, HEAD_DIM), dtype=tl.float32)
    acc = _mma_split(tl.trans(ds_hi), tl.trans(ds_lo), q_hi, q_lo, acc, SPLIT, QK_LO, IEEE,
                     INTERPRET)
    _store(_tile(DK, start, n, h, stride_dkt, stride_dkh, BLOCK, HEAD_DIM), acc * sm_scale,
           SIN, start, n, stride_st, ROTARY, IS_BF16, BLOCK, HALF, INTERPRET)


@triton.jit
def _bwd_kernel(Q, K, V, DO, DQ, DK, DV, SIN,
                tile_start, tile_len, n_tiles, n_programs, tiles_per_program,
                stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                stride_dot, stride_doh, stride_dqt, stride_dqh, stride_dkt, stride_dkh,
                stride_dvt, stride_dvh, stride_st, qk_scale, sm_scale,
                H: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
                ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
                IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
                PERSISTENT: tl.constexpr, CENTRED: tl.constexpr):
    pid = tl.program_id(0)
    if PERSISTENT:  # branch-free, as in _fwd_kernel
        for i in tl.range(0, tiles_per_program):
            h, start, n = _tile_at(pid + i * n_programs, tile_start, tile_len, n_tiles, H)
            _bwd_tile(h, start, n, Q, K, V, DO, DQ, DK, DV, SIN,
                      stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                      stride_dot, stride_doh, stride_dqt, stride_dqh, stride_dkt, stride_dkh,
                      stride_dvt, stride_dvh, stride_st, qk_scale, sm_scale,
                      HEAD_DIM, BLOCK, ROTARY, ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET,
                      CENTRED)
    else:
        h, start, n = _tile_at(pid, tile_start, tile_len, n_tiles, H)
        if n > 0:
            _bwd_tile(h, start, n, Q, K, V, DO, DQ, DK, DV, SIN,
                      stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                      stride_dot, stride_doh, stride_dqt, stride_dqh, stride_dkt, stride_dkh,
                      stride_dvt, stride_dvh, stride_st, qk_scale, sm_scale,
                      HEAD_DIM, BLOCK, ROTARY, ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET,
                      CENTRED)

# ----------------------------------------------------------------------------- launchers

_SPLIT_DTYPES = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class LaunchConfig:
    num_warps: int
    num_stages: int
    programs_per_sm: int  # persistent grid size per SM; 0 = one program per tile
    # Register cap per thread (ptxas -maxrregcount); None lets ptxas take up to 255, which
    # limits a 4-warp CTA to 2 per SM. A cap trades spills for resident CTAs (= loads in flight).
    maxnreg: int | None = None
    # Spill bytes (stores or loads, per ptxas) compile-check accepts for this config: nonzero only
    # where a register cap was measured faster despite its spills (see CONFIGS).
    accepted_spill_bytes: int = 0


# Chosen on an H200 by benchmarks/tune.py; keys: (kernel, rotary, head_dim).
# One program per tile beat every persistent grid size on an H200 at shape P (D=128):
# fwd 1.51 vs 1.55 ms (8/SM), bwd 3.52 vs 3.71 ms, rotary bwd 6.97 vs 9.40 ms; 8 warps were
# 1.5-2x slower (benchmarks/results/tune_d128_h200.json). Since the persistent loop became
# branch-free, Triton software-pipelines it (num_stages >= 2), but two stages of q/k/v/dO take
# 144 KB of shared memory, 1 CTA per SM: bwd 3.97 vs 3.45 ms
# (benchmarks/results/h200_2026-11-22b/tune_persistent_d128.json).
# The register caps come from the maxnreg sweep (benchmarks/results/tune_maxnreg_h200.json; its
# bwd rows measured a since-reverted bwd that re-loaded q and k, 3.89 vs 3.52 ms uncapped):
# 128 registers fit 4 CTAs per SM instead of 3 (fwd D=128: 1.442 vs 1.488 ms; rotary fwd D=64:
# 1.347 vs 1.909 ms), although ptxas then spills ~90-124 B per thread to L1: more loads in
# flight outweigh it. Their spill budget is what compile-check accepts; more fails. Elsewhere a
# cap only added spills and time (rotary fwd D=128 at 128: 11.7 ms): ptxas' own choice stays.
_STAGES = {"fwd": 1, "bwd": 2}  # no loop to pipeline at one tile per program: no effect
CONFIGS: dict[tuple[str, bool, int], LaunchConfig] = {
    ("fwd", False, 128): LaunchConfig(4, 1, 0, maxnreg=128, accepted_spill_bytes=96),
    ("fwd", True, 64): LaunchConfig(4, 1, 0, maxnreg=128, accepted_spill_bytes=128),
    ("bwd", True, 64): LaunchConfig(4, 2, 0, maxnreg=168, accepted_spill_bytes=128),
}


def launch_config(kernel: str, rotary: bool, head_dim: int,
                  dtype: torch.dtype = torch.bfloat16) -> LaunchConfig:
    default = LaunchConfig(num_warps=4, num_stages=_STAGES[kernel], programs_per_sm=0)
    if dtype not in _SPLIT_DTYPES:
        # The tuned configs are for 16-bit inputs. fp32 inputs (the exact-input reference path:
        # ieee dots lowered to FMA loops, not a speed path) spill kilobytes under any cap.
        return default
    return CONFIGS.get((kernel, rotary, head_dim), default)


def block_rows(block_size: int) -> int:
    """Rows of a tile (BLOCK): the block size rounded up to a power of two, at least 16 (the
    smallest tl.dot operand); rows >= the block's valid tokens are masked."""
    return max(16, triton.next_power_of_2(block_size))


def _grid_size(n_tiles: int, device: torch.device, cfg: LaunchConfig) -> int:
    if n_tiles == 0:
        return 0
    if INTERPRET or cfg.programs_per_sm == 0:
        return n_tiles  # one tile per program (always so under the interpreter, see _fwd_kernel)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return min(n_tiles, sms * cfg.programs_per_sm)


def _flags(q: torch.Tensor, sinu_pos: torch.Tensor | None, rotate_v: bool,
           centred: bool = True) -> dict:
    return dict(
        ROTARY=sinu_pos is not None,
        ROTATE_V=sinu_pos is not None and rotate_v,
        SPLIT=q.dtype in _SPLIT_DTYPES,
        IS_BF16=q.dtype == torch.bfloat16,
        IEEE=q.dtype == torch.float32,  # fp32 inputs: full-precision MMAs, no tf32
        INTERPRET=INTERPRET,
        CENTRED=centred,  # backward only: centred dP - Di (see _bwd_tile); False = the old path
    )


def kernel_path(kernel: str, q: Tensor, sinu_pos: Tensor | None, loaded: tuple[Tensor, ...]) -> str:
    """"hopper" or "portable": which kernels run this launch.

    BLOCKATTN_KERNEL_PATH=portable|hopper forces one (hopper raises where it cannot run);
    "prefer-hopper" takes the Hopper path wherever it can run and the portable one elsewhere
    (fp32, the interpreter, inputs TMA cannot walk): what runs the whole suite against it.
    Unset or "auto" takes the Hopper path on sm_90 for 16-bit inputs whose (kernel, rotary,
    head dim) has a measured config in attention_hopper.CONFIGS (entered only where the device
    measured it faster) and whose loaded tensors TMA can read.
    """
    want = os.environ.get("BLOCKATTN_KERNEL_PATH", "auto")
    if want not in ("auto", "portable", "hopper", "prefer-hopper"):
        raise ValueError(f"BLOCKATTN_KERNEL_PATH={want!r}: expected auto, portable, hopper "
                         "or prefer-hopper")
    if want == "portable" or (want == "auto" and INTERPRET):
        return "portable"
    from blockattn.kernels import attention_hopper as AH  # imports this module: import late

    if want == "auto" and (kernel, sinu_pos is not None, q.shape[2]) not in AH.CONFIGS:
        return "portable"  # no measured config: skip the checks below on every launch
    why = None
    # The interpreter runs the Hopper kernels' source too (tests, mutants on CPU).
    on_sm90 = q.device.type == "cuda" and torch.cuda.get_device_capability(q.device) == (9, 0)
    if not (INTERPRET or on_sm90):
        why = "it needs an sm_90 GPU"
    elif q.dtype not in _SPLIT_DTYPES:
        why = f"q.dtype={q.dtype} (it takes bfloat16 and float16)"
    elif not AH.eligible(*loaded):
        why = "TMA needs 16-byte aligned, head-packed (T, H, D) inputs with unit stride along D"
    if want == "hopper":
        if why:
            raise RuntimeError(f"BLOCKATTN_KERNEL_PATH=hopper cannot run: {why}")
        return "hopper"
    return "portable" if why else "hopper"  # prefer-hopper, or auto with a measured config


def attention_fwd(q: Tensor, k: Tensor, v: Tensor, table: TileTable, sinu_pos: Tensor | None,
                  scale: float, block_size: int, rotate_v: bool,
                  out: Tensor | None = None) -> Tensor:
    """Forward launch on validated inputs (unit stride along D). Returns O (T, H, D)."""
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
    if kernel_path("fwd", q, sinu_pos, (q, k, v)) == "hopper":
        from blockattn.kernels import attention_hopper as AH

        return AH.attention_fwd(q, k, v, o, table, sinu_pos, scale, block_size, rotate_v)
    return _launch_fwd(q, k, v, table, sinu_pos, scale, block_size, rotate_v, o)


def _launch_fwd(q: Tensor, k: Tensor, v: Tensor, table: TileTable, sinu_pos: Tensor | None,
                scale: float, block_size: int, rotate_v: bool, o: Tensor) -> Tensor:
    """The portable forward kernel."""
    _, H, D = q.shape
    cfg = launch_config("fwd", sinu_pos is not None, D, q.dtype)
    n_tiles = table.n_slots * H
    grid = _grid_size(n_tiles, q.device, cfg)
    if grid == 0:
        return o
    sin = sinu_pos if sinu_pos is not None else q  # dummy pointer when ROTARY is off
    _fwd_kernel[(grid,)](
        q, k, v, o, sin, table.start, table.length, n_tiles, grid, triton.cdiv(n_tiles, grid),
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        o.stride(0), o.stride(1), sin.stride(0), scale * LOG2E,
        H=H, HEAD_DIM=D, BLOCK=block_rows(block_size),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, maxnreg=cfg.maxnreg,
        PERSISTENT=grid < n_tiles, **_flags(q, sinu_pos, rotate_v),
    )  # fmt: skip
    return o


def attention_bwd(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor, table: TileTable,
                  sinu_pos: Tensor | None, scale: float, block_size: int, rotate_v: bool,
                  grads: tuple[Tensor, Tensor, Tensor] | None = None,
                  centred: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """Backward launch. Returns (dq, dk, dv) w.r.t. the un-rotated q, k, v.

    centred=False runs the previous dS numerics (uncentred dP, one-pass Di, unscaled fp16 dS
    split), kept for comparison; the default is the centred path (see _bwd_tile).
    """
    if grads is None:
        grads = tuple(torch.empty(q.shape, dtype=q.dtype, device=q.device) for _ in range(3))
    if kernel_path("bwd", q, sinu_pos, (q, k, v, grad_out)) == "hopper":
        from blockattn.kernels import attention_hopper as AH

        return AH.attention_bwd(q, k, v, grad_out, grads, table, sinu_pos, scale, block_size,
                                rotate_v, centred)
    return _launch_bwd(q, k, v, grad_out, table, sinu_pos, scale, block_size, rotate_v, grads,
                       centred)


def _launch_bwd(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor, table: TileTable,
                sinu_pos: Tensor | None, scale: float, block_size: int, rotate_v: bool,
                grads: tuple[Tensor, Tensor, Tensor],
                centred: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """The portable backward kernel."""
    _, H, D = q.shape
    dq, dk, dv = grads
    cfg = launch_config("bwd", sinu_pos is not None, D, q.dtype)
    n_tiles = table.n_slots * H
    grid = _grid_size(n_tiles, q.device, cfg)
    if grid == 0:
        return dq, dk, dv
    sin = sinu_pos if sinu_pos is not None else q
    _bwd_kernel[(grid,)](
        q, k, v, grad_out, dq, dk, dv, sin,
        table.start, table.length, n_tiles, grid, triton.cdiv(n_tiles, grid),
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        grad_out.stride(0), grad_out.stride(1), dq.stride(0), dq.stride(1),
        dk.stride(0), dk.stride(1), dv.stride(0), dv.stride(1), sin.stride(0),
        scale * LOG2E, scale,
        H=H, HEAD_DIM=D, BLOCK=block_rows(block_size),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, maxnreg=cfg.maxnreg,
        PERSISTENT=grid < n_tiles, **_flags(q, sinu_pos, rotate_v, centred),
    )  # fmt: skip
    return dq, dk, dv
