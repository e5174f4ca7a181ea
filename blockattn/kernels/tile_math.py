"""The tile arithmetic both kernel paths share (portable `attention.py`, Hopper TMA
`attention_hopper.py`): interpreter shims, numeric helpers, tile pointers, the forward and
backward bodies of one (block, head) tile from its loaded q, k, v (, dO), and the launch flags
that select their compile-time branches. Each path only loads tiles its own way.

Design notes (accuracy, cancellation) are in `attention.py`'s docstring. The fused-rotary 16-bit
backward at D = 128 runs `_bwd_chunks` (the same products in two column chunks of the head dim,
fewer live registers; see attention.CONFIGS) instead of `_bwd_body`; where a config says so,
the forward forms QK^T the same way (`_qk_chunks`, shared by both).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# The interpreter runs the same kernel source on CPU tensors. It differs from the GPU in two ways
# that matter here, each shimmed below and only under the interpreter:
# - its tl.dot silently returns garbage for bf16 operands (triton issue 11584): we upcast the
#   operands to fp32 first, which is exact for bf16/fp16 values;
# - its fp32 -> bf16 cast truncates instead of rounding to nearest even: we round the fp32 bits
#   ourselves first, after which the truncating cast is exact.
INTERPRET: bool = os.environ.get("TRITON_INTERPRET", "0") == "1"

LOG2E = 1.4426950408889634

# The bf16 hi/lo split two elements at a time, as inline PTX (pack=2: $2, $3 two fp32 values,
# $0 hi and $1 lo as bf16 pairs): cvt.rn.bf16x2.f32 rounds both to nearest even, hi goes back to
# fp32 by a shift (low element) or a mask (high one), lo is the rounded residual. The same
# operations as `hi = x.to(bf16); lo = (x - hi.to(fp32)).to(bf16)` in fewer instructions; used by
# _split here and by the Gluon backward (attention_gluon._split).
SPLIT_BF16X2_PTX = tl.constexpr("""{
            .reg .b32 a, b;
            cvt.rn.bf16x2.f32 $0, $3, $2;
            shl.b32 a, $0, 16;
            and.b32 b, $0, 0xffff0000;
            sub.rn.f32 a, $2, a;
            sub.rn.f32 b, $3, b;
            cvt.rn.bf16x2.f32 $1, b, a;
            }""")


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
def _split(x, DT: tl.constexpr, IS_BF16: tl.constexpr, INTERPRET: tl.constexpr,
           PACKED: tl.constexpr = True):
    """x (fp32) ~= hi + lo with hi, lo in DT: hi carries the top bits, lo the next ones.

    bf16 on a GPU: two elements per conversion in PTX (cvt.rn.bf16x2.f32; hi back to fp32 by a
    shift or a mask), the same round-to-nearest-even operations in fewer instructions than the
    compiler's one-element conversions and repacking. PACKED=False keeps the compiler's form,
    for dS: there x is a product, and the compiler contracts `x - hi` into one fma with the
    product's exact residual (the Gluon backward writes that fma itself to keep the same bits).
    """
    if IS_BF16 and PACKED and not INTERPRET:
        hi, lo = tl.inline_asm_elementwise(SPLIT_BF16X2_PTX, "=r,=r,r,r", [x],
                                           dtype=(tl.bfloat16, tl.bfloat16), is_pure=True,
                                           pack=2)
    else:
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
def _row0(base, start, n, h, stride_t, stride_h, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Pointers of a (BLOCK, HEAD_DIM) tile whose every row is token `start` (masked if n = 0)."""
    rows = tl.arange(0, BLOCK)
    tok = (start + rows * 0).to(tl.int64)
    ptrs = base + tok[:, None] * stride_t + h * stride_h + tl.arange(0, HEAD_DIM)[None, :]
    return ptrs, (rows * 0 < n)[:, None]


@triton.jit
def _load(tile):
    ptrs, mask = tile
    return tl.load(ptrs, mask=mask, other=0.0)


@triton.jit
def _load_table(ptrs, mask, SITE: tl.constexpr):
    """A load of the rotary table as fp32; SITE 1 is the same load with an explicit cache hint
    (".ca": cache at all levels, what a global load does on sm_90 anyway).

    Triton merges identical loads with no store between them (CSE): the sin/cos tiles that a
    tile body re-reads to keep them short-lived would then be one load, live from the first use
    to the last. A second SITE is a different op, so its load stays where it is written."""
    if SITE == 1:
        x = tl.load(ptrs, mask=mask, other=0.0, cache_modifier=".ca")
    else:
        x = tl.load(ptrs, mask=mask, other=0.0)
    return x.to(tl.float32)


@triton.jit
def _load_sinu(SIN, start, n, stride_st, ROTARY: tl.constexpr, BLOCK: tl.constexpr,
               HALF: tl.constexpr, COS_AT: tl.constexpr, SITE: tl.constexpr = 0):
    """(BLOCK, HALF) fp32 sin and cos of the block's tokens (zeros when ROTARY is off), from
    table columns [0, HALF) of SIN and COS_AT columns further (the table's D / 2)."""
    sin = tl.zeros((BLOCK, HALF), dtype=tl.float32)
    cos = sin
    if ROTARY:
        ptrs, mask = _tile(SIN, start, n, start, stride_st, 0, BLOCK, HALF)  # h * 0 = 0
        sin = _load_table(ptrs, mask, SITE)
        cos = _load_table(ptrs + COS_AT, mask, SITE)
    return sin, cos


@triton.jit
def _operand(x, SIN, start, n, stride_st, ROTATE: tl.constexpr, SPLIT: tl.constexpr,
             IS_BF16: tl.constexpr, BLOCK: tl.constexpr, HALF: tl.constexpr,
             INTERPRET: tl.constexpr, SITE: tl.constexpr = 0, PACKED: tl.constexpr = True):
    """A loaded (BLOCK, D) tile as an MMA operand: rotated tiles come back as hi/lo halves.

    sin/cos are read per operand (L1 hits after the first) so that the fp32 tables need not be
    live across the whole tile. Triton merges such re-reads where no store lies between them
    (CSE), so in a whole-tile body q's, k's and V's tables are one load unless read at another
    SITE (see _load_table; the chunked bodies and the launch config's placement do that).
    """
    if ROTATE:
        sin, cos = _load_sinu(SIN, start, n, stride_st, True, BLOCK, HALF, HALF, SITE)
        xr = _rotate(x.to(tl.float32), sin, cos, False, BLOCK, HALF)
        if SPLIT:
            hi, lo = _split(xr, x.dtype, IS_BF16, INTERPRET, PACKED)
        else:  # fp32 inputs, or the fast mode: one rounding to the input dtype
            hi = _round_to(xr, x.dtype, IS_BF16, INTERPRET)
            lo = hi
        return hi, lo
    return x, x


@triton.jit
def _minus_mean(x, n, rows_ok):
    """x (fp32, rows >= n zero) minus the mean of its n valid rows; padded rows (rows_ok False,
    a (BLOCK, 1) mask) stay 0."""
    m = tl.sum(x, axis=0) / tl.maximum(n, 1).to(tl.float32)  # padded rows are 0
    return tl.where(rows_ok, x - m[None, :], 0.0)


@triton.jit
def _centred(x, row0, SIN, start, n, stride_st, ROTATE: tl.constexpr, SPLIT: tl.constexpr,
             IS_BF16: tl.constexpr, BLOCK: tl.constexpr, HALF: tl.constexpr,
             INTERPRET: tl.constexpr, SITE: tl.constexpr = 0):
    """A loaded (BLOCK, D) tile minus one row vector m, as hi/lo MMA operand halves.

    Used for V in the backward, where any m subtracted from every row leaves dP - Di unchanged
    (see _bwd_tile); m removes the part that nearly equal rows share from the fp32 dO V^T sums.
    - Rotated tile (fp32 after the rotation): m is the mean of its n valid rows (padded rows
      are 0 and are kept 0), taken before the hi/lo split the rotated tile gets anyway, so no
      MMA is added.
    - Plain tile: m is the block's first row, re-loaded into every row of a (BLOCK, D) tile
      (`row0`, L1 hits; loaded at the tile's own shape so that x - m keeps x's register layout:
      a (1, D) load broadcast forced a column-per-thread layout and scalar shared stores;
      on an H100 a reduction across rows cost more than one more MMA). x - m is exact in fp32
      but not in the input dtype, so it enters as hi + lo: one extra MMA. Padded rows become -m,
      finite, in columns where P is 0.
    """
    if ROTATE:
        sin, cos = _load_sinu(SIN, start, n, stride_st, True, BLOCK, HALF, HALF, SITE)
        xc = _minus_mean(_rotate(x.to(tl.float32), sin, cos, False, BLOCK, HALF), n,
                         (tl.arange(0, BLOCK) < n)[:, None])
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
    return _softmax(s, n, qk_scale, BLOCK)


@triton.jit
def _softmax(s, n, qk_scale, BLOCK: tl.constexpr):
    """Softmax over the n valid keys of the scores s (scaled into the log2 domain), in fp32."""
    s = tl.where((tl.arange(0, BLOCK) < n)[None, :], s * qk_scale, float("-inf"))
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
        sin, cos = _load_sinu(SIN, start, n, stride_st, True, BLOCK, HALF, HALF)
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


# ----------------------------------------------------------------------------- tile bodies


@triton.jit
def _fwd_body(q, k, v, h, start, n, O, SIN, stride_ot, stride_oh, stride_st, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
              ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
              IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
              K_SITE: tl.constexpr = 0, V_SITE: tl.constexpr = 0):
    """The forward of one tile from its loaded q, k, v (rows >= n zero): the body of the Hopper
    TMA kernel (blockattn.kernels.attention_hopper), which loads them its own way. The portable
    kernel runs its two halves itself, loading V in between."""
    p = _fwd_probs(q, k, SIN, start, n, stride_st, qk_scale, HEAD_DIM, BLOCK, ROTARY, SPLIT,
                   IS_BF16, IEEE, INTERPRET, K_SITE)
    _fwd_out(p, v, h, start, n, O, SIN, stride_ot, stride_oh, stride_st, HEAD_DIM, BLOCK,
             ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET, V_SITE)


@triton.jit
def _fwd_probs(q, k, SIN, start, n, stride_st, qk_scale,
               HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, ROTARY: tl.constexpr,
               SPLIT: tl.constexpr, IS_BF16: tl.constexpr, IEEE: tl.constexpr,
               INTERPRET: tl.constexpr, K_SITE: tl.constexpr = 0, PACKED: tl.constexpr = True):
    """The forward's first half: P of one tile from its loaded q, k (k's table read at K_SITE,
    see _load_table: 0 shares q's load; PACKED: see _split)."""
    HALF: tl.constexpr = HEAD_DIM // 2
    q_hi, q_lo = _operand(q, SIN, start, n, stride_st, ROTARY, SPLIT, IS_BF16,
                          BLOCK, HALF, INTERPRET, 0, PACKED)
    k_hi, k_lo = _operand(k, SIN, start, n, stride_st, ROTARY, SPLIT, IS_BF16,
                          BLOCK, HALF, INTERPRET, K_SITE, PACKED)
    p = _probs(q_hi, q_lo, k_hi, k_lo, n, qk_scale, ROTARY and SPLIT, IEEE, INTERPRET, BLOCK)
    return p


@triton.jit
def _fwd_out(p, v, h, start, n, O, SIN, stride_ot, stride_oh, stride_st,
             HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, ROTATE_V: tl.constexpr,
             SPLIT: tl.constexpr, IS_BF16: tl.constexpr, IEEE: tl.constexpr,
             INTERPRET: tl.constexpr, V_SITE: tl.constexpr = 0, PACKED: tl.constexpr = True):
    """The forward's second half: O = P V of one tile, stored (V's table read at V_SITE;
    PACKED: see _split)."""
    HALF: tl.constexpr = HEAD_DIM // 2
    # V is rotated only now, after q/k are dead, to keep register pressure down.
    v_hi, v_lo = _operand(v, SIN, start, n, stride_st, ROTATE_V, SPLIT, IS_BF16,
                          BLOCK, HALF, INTERPRET, V_SITE, PACKED)
    acc = tl.zeros((BLOCK, HEAD_DIM), dtype=tl.float32)
    if SPLIT:
        p_hi, p_lo = _split(p, v.dtype, IS_BF16, INTERPRET, PACKED)
        acc = _mma_split(p_hi, p_lo, v_hi, v_lo, acc, True, ROTATE_V, IEEE, INTERPRET)
    else:  # fp32 inputs, or the fast mode: P rounded to the input dtype (as FA v2)
        acc = _mma(_round_to(p, v.dtype, IS_BF16, INTERPRET), v_hi, acc, IEEE, INTERPRET)
    _store(_tile(O, start, n, h, stride_ot, stride_oh, BLOCK, HEAD_DIM), acc, SIN, start, n,
           stride_st, False, IS_BF16, BLOCK, HALF, INTERPRET)


@triton.jit
def _ds(p, dp, CENTRED: tl.constexpr):
    """dS = P (dP - Di), Di = rowsum(P dP); CENTRED sums Di in two passes (see _bwd_body)."""
    if CENTRED:  # first pass of Di
        dp = dp - tl.sum(p * dp, axis=1)[:, None]
    return p * (dp - tl.sum(p * dp, axis=1)[:, None])  # padded rows: dO = 0, so dS = 0


@triton.jit
def _ds_halves(ds, sm_scale, DT: tl.constexpr, SPLIT: tl.constexpr, CENTRED: tl.constexpr,
               IS_BF16: tl.constexpr, INTERPRET: tl.constexpr):
    """dS (fp32) as hi/lo MMA operand halves in DT, and the scale its products are stored at."""
    if SPLIT:
        if CENTRED and not IS_BF16:
            # fp16: where dS is small (as it is when dP - Di is) its lo half falls below fp16's
            # normal range and loses its bits. Split dS at a power-of-two scale that puts the
            # tile's max |dS| at 2^14, and fold the inverse (exact) into the store scale.
            ds_up, ds_down = _pow2_scale(tl.max(tl.max(tl.abs(ds), axis=1, keep_dims=True),
                                                axis=0, keep_dims=True), 14)
            ds = ds * ds_up
            sm_scale = sm_scale * ds_down
        ds_hi, ds_lo = _split(ds, DT, IS_BF16, INTERPRET, False)  # a product: see _split
    else:  # fp32 inputs, or the fast mode: dS rounded to the input dtype (as FA v2)
        ds_hi = _round_to(ds, DT, IS_BF16, INTERPRET)
        ds_lo = ds_hi
    return ds_hi, ds_lo, sm_scale


@triton.jit
def _bwd_body(q, k, v, do, h, start, n, V, DQ, DK, DV, SIN, stride_vt, stride_vh,
              stride_dqt, stride_dqh, stride_dkt, stride_dkh, stride_dvt, stride_dvh,
              stride_st, qk_scale, sm_scale,
              HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
              ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
              IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
              CENTRED: tl.constexpr, K_SITE: tl.constexpr = 0, V_SITE: tl.constexpr = 0,
              V_LATE: tl.constexpr = False):
    """The backward of one tile from its loaded q, k, v, dO (rows >= n zero); V is re-read only
    for its first row (centred plain V). Also the body of the Hopper TMA kernel. K_SITE and
    V_SITE are where k's and the rotated V's tables are read (see _load_table), V_LATE forms a
    plain centred V after QK^T where it would come first (the launch config's placement)."""
    HALF: tl.constexpr = HEAD_DIM // 2
    QK_LO: tl.constexpr = ROTARY and SPLIT
    V_LO: tl.constexpr = (ROTATE_V or CENTRED) and SPLIT
    # Where the centred plain V is formed (H100, bf16 bwd): before QK^T at D=64 (0.62 vs 0.66 ms
    # after it), after it at D=128 (1.44 vs 1.46 ms). A rotated V always comes after, once q/k
    # are dead, for register pressure.
    V_EARLY: tl.constexpr = CENTRED and not ROTATE_V and HEAD_DIM <= 64 and not V_LATE
    q_hi, q_lo = _operand(q, SIN, start, n, stride_st, ROTARY, SPLIT, IS_BF16,
                          BLOCK, HALF, INTERPRET)
    k_hi, k_lo = _operand(k, SIN, start, n, stride_st, ROTARY, SPLIT, IS_BF16,
                          BLOCK, HALF, INTERPRET, K_SITE)
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
        v_hi, v_lo = _centred(v, _row0(V, start, n, h, stride_vt, stride_vh, BLOCK, HEAD_DIM),
                              SIN, start, n, stride_st, False, SPLIT, IS_BF16,
                              BLOCK, HALF, INTERPRET)
    p = _probs(q_hi, q_lo, k_hi, k_lo, n, qk_scale, QK_LO, IEEE, INTERPRET, BLOCK)
    if CENTRED and not V_EARLY:
        v_hi, v_lo = _centred(v, _row0(V, start, n, h, stride_vt, stride_vh, BLOCK, HEAD_DIM),
                              SIN, start, n, stride_st, ROTATE_V, SPLIT, IS_BF16,
                              BLOCK, HALF, INTERPRET, V_SITE)
    elif not CENTRED:
        v_hi, v_lo = _operand(v, SIN, start, n, stride_st, ROTATE_V, SPLIT, IS_BF16,
                              BLOCK, HALF, INTERPRET)
    dp = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    dp = _mma_split(do, do, tl.trans(v_hi), tl.trans(v_lo), dp, False, V_LO, IEEE, INTERPRET)
    ds = _ds(p, dp, CENTRED)
    # Each gradient is stored as soon as it is complete, so only one (BLOCK, D) fp32
    # accumulator is live at a time.
    acc = tl.zeros((BLOCK, HEAD_DIM), dtype=tl.float32)
    if SPLIT:
        p_hi, p_lo = _split(p, q.dtype, IS_BF16, INTERPRET)
        acc = _mma_split(tl.trans(p_hi), tl.trans(p_lo), do, do, acc, True, False, IEEE,
                         INTERPRET)
    else:  # fp32 inputs, or the fast mode: P rounded to the input dtype
        acc = _mma(tl.trans(_round_to(p, q.dtype, IS_BF16, INTERPRET)), do, acc, IEEE, INTERPRET)
    _store(_tile(DV, start, n, h, stride_dvt, stride_dvh, BLOCK, HEAD_DIM), acc, SIN, start, n,
           stride_st, ROTATE_V, IS_BF16, BLOCK, HALF, INTERPRET)
    ds_hi, ds_lo, sm_scale = _ds_halves(ds, sm_scale, q.dtype, SPLIT, CENTRED, IS_BF16,
                                        INTERPRET)
    acc = tl.zeros((BLOCK, HEAD_DIM), dtype=tl.float32)
    acc = _mma_split(ds_hi, ds_lo, k_hi, k_lo, acc, SPLIT, QK_LO, IEEE, INTERPRET)
    _store(_tile(DQ, start, n, h, stride_dqt, stride_dqh, BLOCK, HEAD_DIM), acc * sm_scale,
           SIN, start, n, stride_st, ROTARY, IS_BF16, BLOCK, HALF, INTERPRET)
    acc = tl.zeros((BLOCK, HEAD_DIM), dtype=tl.float32)
    acc = _mma_split(tl.trans(ds_hi), tl.trans(ds_lo), q_hi, q_lo, acc, SPLIT, QK_LO, IEEE,
                     INTERPRET)
    _store(_tile(DK, start, n, h, stride_dkt, stride_dkh, BLOCK, HEAD_DIM), acc * sm_scale,
           SIN, start, n, stride_st, ROTARY, IS_BF16, BLOCK, HALF, INTERPRET)


# ----------------------------------------------------------------------------- column chunks


@triton.jit
def _chunk_sin_cos(SIN, start, n, stride_st, c, CW: tl.constexpr, HEAD_DIM: tl.constexpr,
                   BLOCK: tl.constexpr, SITE: tl.constexpr):
    """(BLOCK, CW / 2) fp32 sin and cos of rotary pairs [c CW / 2, (c + 1) CW / 2): the pairs
    of columns [c CW, (c + 1) CW) (a pair never straddles chunks)."""
    return _load_sinu(SIN + c * (CW // 2), start, n, stride_st, True, BLOCK, CW // 2,
                      HEAD_DIM // 2, SITE)


@triton.jit
def _load_chunk(X, start, n, h, stride_t, stride_h, c, CW: tl.constexpr, BLOCK: tl.constexpr):
    """Column chunk c (columns [c CW, (c + 1) CW)) of X's tile as loaded (rows >= n zero)."""
    return _load(_tile(X + c * CW, start, n, h, stride_t, stride_h, BLOCK, CW))


@triton.jit
def _rotate_chunk(x, SIN, start, n, stride_st, c, CW: tl.constexpr, HEAD_DIM: tl.constexpr,
                  BLOCK: tl.constexpr, SITE: tl.constexpr):
    """A loaded column chunk c in fp32, rotated by the table read at SITE (see _load_table)."""
    sin, cos = _chunk_sin_cos(SIN, start, n, stride_st, c, CW, HEAD_DIM, BLOCK, SITE)
    return _rotate(x.to(tl.float32), sin, cos, False, BLOCK, CW // 2)


@triton.jit
def _store_chunk(X, x, SIN, start, n, h, stride_t, stride_h, stride_st, c, ROTATE: tl.constexpr,
                 CW: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
                 IS_BF16: tl.constexpr, INTERPRET: tl.constexpr):
    """Store fp32 column chunk c of a gradient tile, rotated back first if ROTATE (table SITE 1:
    the first store's table would otherwise merge with the QK^T loop's, see _bwd_chunks)."""
    if ROTATE:
        sin, cos = _chunk_sin_cos(SIN, start, n, stride_st, c, CW, HEAD_DIM, BLOCK, 1)
        x = _rotate(x, sin, cos, True, BLOCK, CW // 2)
    _store(_tile(X + c * CW, start, n, h, stride_t, stride_h, BLOCK, CW), x, SIN, start, n,
           stride_st, False, IS_BF16, BLOCK, CW // 2, INTERPRET)


@triton.jit
def _qk_chunks(h, start, n, Q, K, SIN, stride_qt, stride_qh, stride_kt, stride_kh, stride_st,
               HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, CHUNKS: tl.constexpr,
               PRELOAD: tl.constexpr, IS_BF16: tl.constexpr, IEEE: tl.constexpr,
               INTERPRET: tl.constexpr):
    """S = sum_c Q_c K_c^T over CHUNKS column chunks of the head dim (fused rotary, 16-bit
    inputs): each chunk of q and k is rotated and split into hi/lo halves on its own, so only
    one chunk's fp32 rotation and table are live. PRELOAD issues every chunk's 16-bit loads
    first, all in flight at once (the backward: 0.999-1.004x the time of the previous,
    spilling kernel against 1.021-1.025x without, bf16, H100), else each chunk is loaded where
    it is rotated (the forward: 164 registers against 203 with PRELOAD at fp16 D = 128, 3 CTAs
    per SM instead of 2; 0.949x against 1.110x). Returns S and the halves as tuples (q_hi,
    q_lo per chunk; k likewise) for the backward's dK and dQ; the forward drops them."""
    CW: tl.constexpr = HEAD_DIM // CHUNKS
    DT: tl.constexpr = Q.dtype.element_ty
    s = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    qs = ()
    ks = ()
    q_raw = ()
    k_raw = ()
    for c in tl.static_range(CHUNKS):
        if PRELOAD:
            q_raw = q_raw + (_load_chunk(Q, start, n, h, stride_qt, stride_qh, c, CW, BLOCK),)  # noqa: RUF005
            k_raw = k_raw + (_load_chunk(K, start, n, h, stride_kt, stride_kh, c, CW, BLOCK),)  # noqa: RUF005
    for c in tl.static_range(CHUNKS):
        if not PRELOAD:
            q_raw = q_raw + (_load_chunk(Q, start, n, h, stride_qt, stride_qh, c, CW, BLOCK),)  # noqa: RUF005
            k_raw = k_raw + (_load_chunk(K, start, n, h, stride_kt, stride_kh, c, CW, BLOCK),)  # noqa: RUF005
        q_hi, q_lo = _split(_rotate_chunk(q_raw[c], SIN, start, n, stride_st, c, CW, HEAD_DIM,
                                          BLOCK, 0), DT, IS_BF16, INTERPRET)
        k_hi, k_lo = _split(_rotate_chunk(k_raw[c], SIN, start, n, stride_st, c, CW, HEAD_DIM,
                                          BLOCK, 0), DT, IS_BF16, INTERPRET)
        s = _mma_split(q_hi, q_lo, tl.trans(k_hi), tl.trans(k_lo), s, True, True, IEEE,
                       INTERPRET)
        qs = qs + (q_hi, q_lo)  # noqa: RUF005 (the JIT takes + on tuples, not starred ones)
        ks = ks + (k_hi, k_lo)  # noqa: RUF005
    return s, qs, ks


@triton.jit
def _bwd_chunks(h, start, n, Q, K, V, DO, DQ, DK, DV, SIN,
                stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                stride_dot, stride_doh, stride_dqt, stride_dqh, stride_dkt, stride_dkh,
                stride_dvt, stride_dvh, stride_st, qk_scale, sm_scale,
                HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, CHUNKS: tl.constexpr,
                ROTATE_V: tl.constexpr, IS_BF16: tl.constexpr, IEEE: tl.constexpr,
                INTERPRET: tl.constexpr):
    """_bwd_body for fused rotary with 16-bit inputs (centred), in CHUNKS column chunks of the
    head dim: each chunk of q, k, V and dO is loaded, rotated, centred and split on its own and
    enters S = sum_c Q_c K_c^T and dP = sum_c dO_c (V_c - m_c)^T; each gradient leaves chunk by
    chunk (dV_c = P^T dO_c, dQ_c = dS K_c, dK_c = dS^T Q_c). Only one chunk's fp32 rotation
    and one chunk of a gradient accumulator are live at a time: the whole-tile body spills
    (ptxas, sm_90). The arithmetic is _bwd_body's; only S's and dP's sums run in chunk order."""
    CW: tl.constexpr = HEAD_DIM // CHUNKS
    DT: tl.constexpr = Q.dtype.element_ty
    rows_ok = (tl.arange(0, BLOCK) < n)[:, None]
    s, qs, ks = _qk_chunks(h, start, n, Q, K, SIN, stride_qt, stride_qh, stride_kt, stride_kh,
                           stride_st, HEAD_DIM, BLOCK, CHUNKS, True, IS_BF16, IEEE, INTERPRET)
    p = _softmax(s, n, qk_scale, BLOCK)
    # dP = dO (V - m)^T, m one row vector per block (see _centred): the rotated V's mean over
    # its n valid rows, or the plain V's first row; both taken per column, so per chunk. V's
    # table is read at SITE 1: merged with the QK^T loop's (same addresses, no store between),
    # both chunks' sin/cos stayed live across the softmax and spilled (sm_90: 36/32 B bf16/fp16).
    dp = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    dos = ()
    for c in tl.static_range(CHUNKS):
        do = _load_chunk(DO, start, n, h, stride_dot, stride_doh, c, CW, BLOCK)
        v = _load_chunk(V, start, n, h, stride_vt, stride_vh, c, CW, BLOCK).to(tl.float32)
        if ROTATE_V:
            v = _minus_mean(_rotate_chunk(v, SIN, start, n, stride_st, c, CW, HEAD_DIM, BLOCK, 1),
                            n, rows_ok)
        else:
            v = v - _load(_row0(V + c * CW, start, n, h, stride_vt, stride_vh, BLOCK,
                                CW)).to(tl.float32)
        v_hi, v_lo = _split(v, DT, IS_BF16, INTERPRET)
        dp = _mma_split(do, do, tl.trans(v_hi), tl.trans(v_lo), dp, False, True, IEEE,
                        INTERPRET)
        dos = dos + (do,)  # noqa: RUF005
    ds = _ds(p, dp, True)
    p_hi, p_lo = _split(p, DT, IS_BF16, INTERPRET)
    for c in tl.static_range(CHUNKS):
        acc = tl.zeros((BLOCK, CW), dtype=tl.float32)
        acc = _mma_split(tl.trans(p_hi), tl.trans(p_lo), dos[c], dos[c], acc, True, False, IEEE,
                         INTERPRET)
        _store_chunk(DV, acc, SIN, start, n, h, stride_dvt, stride_dvh, stride_st, c, ROTATE_V,
                     CW, HEAD_DIM, BLOCK, IS_BF16, INTERPRET)
    ds_hi, ds_lo, sm_scale = _ds_halves(ds, sm_scale, DT, True, True, IS_BF16, INTERPRET)
    for c in tl.static_range(CHUNKS):
        acc = tl.zeros((BLOCK, CW), dtype=tl.float32)
        acc = _mma_split(ds_hi, ds_lo, ks[2 * c], ks[2 * c + 1], acc, True, True, IEEE,
                         INTERPRET)
        _store_chunk(DQ, acc * sm_scale, SIN, start, n, h, stride_dqt, stride_dqh, stride_st, c,
                     True, CW, HEAD_DIM, BLOCK, IS_BF16, INTERPRET)
    for c in tl.static_range(CHUNKS):
        acc = tl.zeros((BLOCK, CW), dtype=tl.float32)
        acc = _mma_split(tl.trans(ds_hi), tl.trans(ds_lo), qs[2 * c], qs[2 * c + 1], acc, True,
                         True, IEEE, INTERPRET)
        _store_chunk(DK, acc * sm_scale, SIN, start, n, h, stride_dkt, stride_dkh, stride_st, c,
                     True, CW, HEAD_DIM, BLOCK, IS_BF16, INTERPRET)


# ----------------------------------------------------------------------------- launch flags

_SPLIT_DTYPES = (torch.bfloat16, torch.float16)


def block_rows(block_size: int) -> int:
    """Rows of a tile (BLOCK): the block size rounded up to a power of two, at least 16 (the
    smallest tl.dot operand); rows >= the block's valid tokens are masked."""
    return max(16, triton.next_power_of_2(block_size))


def _flags(q: torch.Tensor, sinu_pos: torch.Tensor | None, rotate_v: bool,
           centred: bool = True, fast: bool = False) -> dict:
    """The kernels' compile-time flags. `fast` is the declared fast precision mode
    (`precision="fast"`, accuracy model fp32-rounded-operands): no hi/lo split, so the rotated
    q, k, v, P and dS enter their MMAs rounded once to the input dtype, as FA v2 rounds P and
    dS, and the backward is not centred (dP from V itself, Di in one pass)."""
    return dict(
        ROTARY=sinu_pos is not None,
        ROTATE_V=sinu_pos is not None and rotate_v,
        SPLIT=q.dtype in _SPLIT_DTYPES and not fast,
        IS_BF16=q.dtype == torch.bfloat16,
        IEEE=q.dtype == torch.float32,  # fp32 inputs: full-precision MMAs, no tf32
        INTERPRET=INTERPRET,
        # backward only: centred dP - Di (see _bwd_tile); False = the old path (and fast mode)
        CENTRED=centred and not fast,
    )
