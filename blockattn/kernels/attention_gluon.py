"""Hopper (sm_90) backward in Gluon: the plain (no rotary) 16-bit backward with the next tile's
loads in flight while this tile computes. Reads top-down: helpers, kernels, configs, launcher.

Why: the portable backward waits for every load before its chain of MMAs (the H100 lost ~15 %
of the copy ceiling to that wait, issue 23); Triton's `tl.dot` cannot issue a TMA load under a
running MMA chain, Gluon can. Each persistent CTA walks its share of the tile table.

The arithmetic is the portable centred backward's (attention.py's docstring), operation for
operation and MMA for MMA in the same order, so the outputs are bitwise the portable kernel's
(tests/kernels/test_gluon_path.py checks it on the GPU):
- S = Q K^T, P = softmax over the n valid keys (fp32, log2 domain);
- dP = dO (V - V_0)^T, V_0 the block's first row, V - V_0 as hi + lo (2 MMAs); Di summed twice;
- dS = P (dP - Di); fp16 splits dS at a power-of-two scale (its lo half stays normal);
- dV = P^T dO, dQ = dS K, dK = dS^T Q, with P and dS as hi + lo (2 MMAs each).
The bf16 splits and widenings are written in PTX, two elements per instruction (_split,
_widen, _split_product: ~7 % fewer instructions than the compiler's conversions); dS's lo comes
from the exact residual fma(P, dP - Di, -hi), the fma the compiler contracts the portable
kernel's `dS - hi` into. The MMAs are asynchronous, each accumulator's in that order: S runs
while V is centred, dV while dS is split, dK while dQ leaves.

Partial blocks: a TMA box reads 64 rows; rows past the tile's n (the next sequence's) are
zeroed in shared memory before any MMA, keys past n get score -inf, and a partial tile's rows
leave by masked stores (a 64-row TMA box would overwrite the next sequence's gradients).

Two kernels, three configurations, the same arithmetic and bits: _bwd_kernel, one chain per
CTA with two input stages; _bwd_kernel_chains, chains of one stage each (every buffer reloaded
as soon as its last reader is done): two per CTA (two warpgroups under warp_specialize), so that
one computes while the other waits on its loads, or one alone (the lean kernel), small enough
for three CTAs per SM at D = 64. Which runs where is measured per GPU (chains(), lean()).

Gluon has no interpreter: off sm_90 dispatch falls back; CPU tests build it for sm_90 ahead of
time (tests/kernels/test_gluon_path.py).
"""

from __future__ import annotations

import functools
import os

import torch
from torch import Tensor
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from blockattn.kernels.tile_math import SPLIT_BF16X2_PTX
from blockattn.kernels.tiles import TileTable

BLOCK = 64  # rows of a tile: one warpgroup MMA's M
LOG2E = 1.4426950408889634

# ----------------------------------------------------------------------------- helpers


@gluon.constexpr_function
def mma_layout(N, num_warps):
    """Register layout of a warpgroup MMA's (64, N) fp32 accumulator (one row of warps)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                     instr_shape=[16, N, 16])


@gluon.constexpr_function
def row_layout(num_warps):
    """A row-contiguous register layout (8 elements, 16 bytes of a 16-bit tile, per thread):
    shared-memory round trips and masked global access."""
    return gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])


@gluon.jit
def _issue_loads(q_desc, k_desc, v_desc, do_desc, row, col, bar, stage, q_s, k_s, v_s, do_s,
                 pred):
    """TMA of one tile's q, k, v, dO into `stage`, completing on `bar`."""
    nbytes: gl.constexpr = 4 * q_desc.block_type.nbytes
    mbarrier.expect(bar, nbytes, pred=pred)
    tma.async_copy_global_to_shared(q_desc, [row, col], bar, q_s.index(stage), pred)
    tma.async_copy_global_to_shared(k_desc, [row, col], bar, k_s.index(stage), pred)
    tma.async_copy_global_to_shared(v_desc, [row, col], bar, v_s.index(stage), pred)
    tma.async_copy_global_to_shared(do_desc, [row, col], bar, do_s.index(stage), pred)


@gluon.jit
def _tile_at(t, tile_start, tile_len, H: gl.constexpr):
    """(first token, valid tokens, head) of tile t (t < n_tiles)."""
    blk = t // H
    return gl.load(tile_start + blk), gl.load(tile_len + blk), t % H


@gluon.jit
def _zero_rows(buf, n, lay: gl.constexpr):
    """Rows >= n of a shared (BLOCK, D) tile set to 0 (they belong to the next sequence)."""
    x = buf.load(lay)
    rows = gl.arange(0, x.shape[0], layout=gl.SliceLayout(1, lay))
    buf.store(gl.where(gl.expand_dims(rows < n, 1), x, gl.zeros_like(x)))


@gluon.jit
def _split(x, dtype: gl.constexpr):
    """fp32 x ~= hi + lo, both in dtype (round to nearest even)."""
    if dtype == gl.bfloat16:
        # Two elements per conversion (tile_math.SPLIT_BF16X2_PTX): the compiler's own
        # lowering converts one element per F2F and repacks.
        hi, lo = gl.inline_asm_elementwise(SPLIT_BF16X2_PTX, "=r,=r,r,r", [x],
                                           dtype=(gl.bfloat16, gl.bfloat16), is_pure=True,
                                           pack=2)
    else:
        hi = x.to(dtype)
        lo = (x - hi.to(gl.float32)).to(dtype)
    return hi, lo


@gluon.jit
def _widen(x):
    """A bf16 tensor as fp32, two elements per 32-bit register by one shift and one mask (the
    compiler extracts the upper element with a PRMT and then shifts it); other dtypes by .to."""
    if x.dtype == gl.bfloat16:
        y = gl.inline_asm_elementwise(
            """shl.b32 $0, $2, 16;
            and.b32 $1, $2, 0xffff0000;""",
            "=r,=r,r", [x], dtype=gl.float32, is_pure=True, pack=2)
    else:
        y = x.to(gl.float32)
    return y


@gluon.jit
def _split_product(a, b, dtype: gl.constexpr):
    """fp32 a * b ~= hi + lo in dtype, lo from the exact residual fma(a, b, -hi): what the
    compiler makes of `x = a * b; lo = x - hi` (it contracts the two into one fma), in the
    portable kernel too, so both keep the same bits. bf16 two elements per conversion (_split);
    other dtypes leave the contraction to the compiler."""
    if dtype == gl.bfloat16:
        hi, lo = gl.inline_asm_elementwise(
            """{
            .reg .b32 x, y, a, b;
            mul.rn.f32 x, $2, $4;
            mul.rn.f32 y, $3, $5;
            cvt.rn.bf16x2.f32 $0, y, x;
            shl.b32 a, $0, 16;
            and.b32 b, $0, 0xffff0000;
            neg.f32 a, a;
            neg.f32 b, b;
            fma.rn.f32 a, $2, $4, a;
            fma.rn.f32 b, $3, $5, b;
            cvt.rn.bf16x2.f32 $1, b, a;
            }""",
            "=r,=r,r,r,r,r", [a, b], dtype=(gl.bfloat16, gl.bfloat16), is_pure=True,
            pack=2)
    else:
        hi, lo = _split(a * b, dtype)
    return hi, lo


@gluon.jit
def _centred_split(vb, V, start, n, h, stride_vt, stride_vh, lay: gl.constexpr,
                   dtype: gl.constexpr):
    """V (shared) minus its block's first row (global, an L2 hit) as hi + lo: the portable
    kernel's centring. Rows >= n (zeroed) become -row0: finite, in dP's columns where P is 0."""
    HD: gl.constexpr = vb.shape[1]
    return _centred_split_by(vb, _row0(V, start, n, h, stride_vt, stride_vh, HD, lay), lay, dtype)


@gluon.jit
def _row0(V, start, n, h, stride_vt, stride_vh, HD: gl.constexpr, lay: gl.constexpr):
    """The first row of a tile's V block, fp32, from global memory (columns in `lay`); a padding
    slot (n = 0, start = T) reads nothing (row T is past the tensor)."""
    cols = gl.arange(0, HD, layout=gl.SliceLayout(0, lay))
    return gl.load(V + start * stride_vt + h * stride_vh + cols, mask=(cols < HD) & (n > 0),
                   other=0.0).to(gl.float32)


@gluon.jit
def _centred_split_by(vb, row0, lay: gl.constexpr, dtype: gl.constexpr):
    """_centred_split with the block's first row already loaded (_row0)."""
    v = _widen(vb.load(lay))
    return _split(v - gl.expand_dims(row0, 0), dtype)


@gluon.jit
def _probs(sc, n, qk_scale, s_lay: gl.constexpr):
    """P = softmax over the n valid keys of the scores sc (scaled into the log2 domain), fp32:
    tile_math._softmax's operations (the rotary forward's too)."""
    cols = gl.arange(0, sc.shape[1], layout=gl.SliceLayout(0, s_lay))
    sc = gl.where(gl.expand_dims(cols < n, 0), sc * qk_scale, float("-inf"))
    p = gl.exp2(sc - gl.expand_dims(gl.max(sc, axis=1), 1))
    return p / gl.expand_dims(gl.sum(p, axis=1), 1)


@gluon.jit
def _probs_and_ds(sc, dp, n, qk_scale, s_lay: gl.constexpr):
    """P (_probs) and dS = P (dP - Di), Di summed twice (first pass shifts dP by the fp32 Di,
    second sums the shifted terms). dS is returned as its two factors (P, dP - Di):
    _split_product takes its lo from the exact residual."""
    p = _probs(sc, n, qk_scale, s_lay)
    dp = dp - gl.expand_dims(gl.sum(p * dp, axis=1), 1)
    return p, dp - gl.expand_dims(gl.sum(p * dp, axis=1), 1)


@gluon.jit
def _pow2_scale(amax, EXP: gl.constexpr):
    """(2^e, 2^-e) with amax * 2^e in [2^EXP, 2^(EXP+1)) for a finite amax > 0, e clamped to
    [-64, 64]: scaling by them is exact."""
    e = EXP + 127 - ((amax.to(gl.uint32, bitcast=True) >> 23) & 0xFF).to(gl.int32)
    e = gl.minimum(gl.maximum(e, -64), 64)
    up = ((e + 127).to(gl.uint32) << 23).to(gl.float32, bitcast=True)
    down = ((127 - e).to(gl.uint32) << 23).to(gl.float32, bitcast=True)
    return up, down


@gluon.jit
def _ds_factors(p, t, sm_scale, IS_BF16: gl.constexpr):
    """dS = p t as the two factors _split_product takes, and the gradients' store scale. bf16:
    (p, t). fp16: dS at a power-of-two scale putting the tile's max |dS| at 2^14, so its lo half
    stays in fp16's normal range, as (dS, 2^e); the inverse joins the store scale."""
    a = p
    b = t
    dscale = sm_scale
    if not IS_BF16:
        a = p * t
        up, down = _pow2_scale(gl.max(gl.max(gl.abs(a), axis=1), axis=0), 14)
        b = up
        dscale = sm_scale * down
    return a, b, dscale


@gluon.jit
def _store_rows(base, buf, start, n, h, stride_t, stride_h, lay: gl.constexpr):
    """Masked store of the n valid rows of a tile staged in shared memory (a partial tile),
    read back in a row-contiguous layout so each thread stores 16-byte vectors."""
    x = buf.load(lay)
    rows = gl.arange(0, x.shape[0], layout=gl.SliceLayout(1, lay))
    cols = gl.arange(0, x.shape[1], layout=gl.SliceLayout(0, lay))
    # min(rows, n - 1) (rows >= n are masked): varies per tile, so the compiler does not hoist
    # these offsets out of the tile loop into registers held across it (they spilled)
    offs = gl.minimum(rows, n - 1) * stride_t
    ptrs = (base + start.to(gl.int64) * stride_t + h * stride_h
            + gl.expand_dims(offs, 1) + gl.expand_dims(cols, 0))
    mask = gl.expand_dims(rows < n, 1) & gl.expand_dims(cols < x.shape[1], 0)
    gl.store(ptrs, x, mask=mask)


# ----------------------------------------------------------------------------- kernel


@gluon.jit
def _bwd_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, V, DQ, DK, DV,
                tile_start, tile_len, n_tiles, stride_vt, stride_vh, stride_dqt, stride_dqh,
                stride_dkt, stride_dkh, stride_dvt, stride_dvh, qk_scale, sm_scale,
                H: gl.constexpr, IS_BF16: gl.constexpr, num_warps: gl.constexpr):
    BM: gl.constexpr = q_desc.block_type.shape[0]
    HD: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    lay: gl.constexpr = q_desc.layout
    # inputs: two stages (this tile, the next one's loads)
    q_s = gl.allocate_shared_memory(dtype, [2, BM, HD], lay)
    k_s = gl.allocate_shared_memory(dtype, [2, BM, HD], lay)
    v_s = gl.allocate_shared_memory(dtype, [2, BM, HD], lay)
    do_s = gl.allocate_shared_memory(dtype, [2, BM, HD], lay)
    pp_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BM], dtype)
    pd_s = gl.allocate_shared_memory(dtype, [2, BM, BM], pp_lay)  # P, then dS: hi, lo
    # centred V (hi, lo); once dP is formed they stage dQ and dK for the TMA stores
    vc_s = gl.allocate_shared_memory(dtype, [2, BM, HD], lay)
    dv_s = gl.allocate_shared_memory(dtype, [BM, HD], lay)
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(bars.index(i), count=1)

    s_lay: gl.constexpr = mma_layout(BM, num_warps)
    o_lay: gl.constexpr = mma_layout(HD, num_warps)
    r_lay: gl.constexpr = row_layout(num_warps)
    pid = gl.program_id(0)
    n_prog = gl.num_programs(0)
    n_my = (n_tiles - pid + n_prog - 1) // n_prog
    # The table is read a tile ahead of the TMA issue that needs it (no issue waits on a load);
    # a slot past the real blocks (n = 0) starts at T: its box is out of bounds, it computes nil
    start, n, h = _tile_at(pid, tile_start, tile_len, H)
    nx_start, nx_n, nx_h = _tile_at(gl.minimum(pid + n_prog, n_tiles - 1), tile_start, tile_len,
                                    H)
    _issue_loads(q_desc, k_desc, v_desc, do_desc, start.to(gl.int32), h * HD, bars.index(0), 0,
                 q_s, k_s, v_s, do_s, n_my > 0)
    for i in range(n_my):
        t = pid + i * n_prog
        stage = i % 2
        # the next tile's loads go out before this tile's math (its stage was freed last step)
        _issue_loads(q_desc, k_desc, v_desc, do_desc, nx_start.to(gl.int32), nx_h * HD,
                     bars.index(1 - stage), 1 - stage, q_s, k_s, v_s, do_s, i + 1 < n_my)
        nn_start, nn_n, nn_h = _tile_at(gl.minimum(t + 2 * n_prog, n_tiles - 1), tile_start,
                                        tile_len, H)
        # V's first row is read before the wait: its latency hides under the TMA's
        row0 = _row0(V, start, n, h, stride_vt, stride_vh, HD, r_lay)
        mbarrier.wait(bars.index(stage), (i // 2) & 1)
        if n > 0:
            qb = q_s.index(stage)
            kb = k_s.index(stage)
            vb = v_s.index(stage)
            dob = do_s.index(stage)
            if n < BM:
                _zero_rows(qb, n, r_lay)
                _zero_rows(kb, n, r_lay)
                _zero_rows(vb, n, r_lay)
                _zero_rows(dob, n, r_lay)
                fence_async_shared()
            # The MMAs are asynchronous, each accumulator's in the portable kernel's order (the
            # same bits): S runs while V is centred, dV while dS is split, dK while dQ is stored.
            zs = gl.zeros([BM, BM], gl.float32, s_lay)
            sc = warpgroup_mma(qb, kb.permute((1, 0)), zs, use_acc=False, is_async=True)
            vhi, vlo = _centred_split_by(vb, row0, r_lay, dtype)
            tma.store_wait(pendings=0)  # the last tile's gradients have left vc_s and dv_s
            vc_s.index(0).store(vhi)
            vc_s.index(1).store(vlo)
            fence_async_shared()
            dp = warpgroup_mma(dob, vc_s.index(1).permute((1, 0)), zs, use_acc=False,
                               is_async=True)
            dp = warpgroup_mma(dob, vc_s.index(0).permute((1, 0)), dp, is_async=True)
            sc, dp = warpgroup_mma_wait(0, deps=[sc, dp])
            p, dpd = _probs_and_ds(sc, dp, n, qk_scale, s_lay)  # dS = p (dP - Di)
            ds_a, ds_b, dscale = _ds_factors(p, dpd, sm_scale, IS_BF16)
            phi, plo = _split(p, dtype)
            pd_s.index(0).store(phi)
            pd_s.index(1).store(plo)
            fence_async_shared()
            # each gradient goes to shared memory (its TMA store's staging buffer) once complete:
            # held to the end they spilled 120 B at D = 128. The lo halves go first, as in the
            # portable kernel's _mma_split: the same sums in the same order.
            zo = gl.zeros([BM, HD], gl.float32, o_lay)
            dv = warpgroup_mma(pd_s.index(1).permute((1, 0)), dob, zo, use_acc=False,
                               is_async=True)
            dv = warpgroup_mma(pd_s.index(0).permute((1, 0)), dob, dv, is_async=True)
            dshi, dslo = _split_product(ds_a, ds_b, dtype)
            dv = warpgroup_mma_wait(0, deps=[dv])
            dv_s.store(dv.to(dtype))
            pd_s.index(0).store(dshi)  # P's buffers, free once dV is done: 16 KB less
            pd_s.index(1).store(dslo)
            fence_async_shared()
            dq = warpgroup_mma(pd_s.index(1), kb, zo, use_acc=False, is_async=True)
            dq = warpgroup_mma(pd_s.index(0), kb, dq, is_async=True)
            dk = warpgroup_mma(pd_s.index(1).permute((1, 0)), qb, zo, use_acc=False,
                               is_async=True)
            dk = warpgroup_mma(pd_s.index(0).permute((1, 0)), qb, dk, is_async=True)
            dq = warpgroup_mma_wait(2, deps=[dq])
            vc_s.index(0).store((dq * dscale).to(dtype))
            dk = warpgroup_mma_wait(0, deps=[dk])
            vc_s.index(1).store((dk * dscale).to(dtype))
            if n == BM:
                fence_async_shared()
                row = start.to(gl.int32)
                tma.async_copy_shared_to_global(dv_desc, [row, h * HD], dv_s)
                tma.async_copy_shared_to_global(dq_desc, [row, h * HD], vc_s.index(0))
                tma.async_copy_shared_to_global(dk_desc, [row, h * HD], vc_s.index(1))
            else:
                _store_rows(DV, dv_s, start, n, h, stride_dvt, stride_dvh, r_lay)
                _store_rows(DQ, vc_s.index(0), start, n, h, stride_dqt, stride_dqh, r_lay)
                _store_rows(DK, vc_s.index(1), start, n, h, stride_dkt, stride_dkh, r_lay)
        start, n, h = nx_start, nx_n, nx_h
        nx_start, nx_n, nx_h = nn_start, nn_n, nn_h
    tma.store_wait(pendings=0)
    for i in gl.static_range(2):
        mbarrier.invalidate(bars.index(i))


@gluon.jit
def _load_pair(desc_a, desc_b, row, col, bar, buf_a, buf_b, pred):
    """TMA of two of a tile's inputs, completing on `bar`."""
    mbarrier.expect(bar, 2 * desc_a.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(desc_a, [row, col], bar, buf_a, pred)
    tma.async_copy_global_to_shared(desc_b, [row, col], bar, buf_b, pred)


@gluon.jit
def _put(x, buf, desc, base, start, n, h, stride_t, stride_h, r_lay: gl.constexpr):
    """A finished gradient tile to `buf` and on to global memory: by TMA store for a full tile
    (asynchronous: the caller waits before reusing `buf`), by masked row stores for a partial
    one (a 64-row box would overwrite the next sequence's rows)."""
    buf.store(x)
    fence_async_shared()
    if n == buf.shape[0]:
        tma.async_copy_shared_to_global(desc, [start.to(gl.int32), h * buf.shape[1]], buf)
    else:
        _store_rows(base, buf, start, n, h, stride_t, stride_h, r_lay)


@gluon.jit
def _consumer(C: gl.constexpr, q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, V,
              DQ, DK, DV, tile_start, tile_len, n_tiles, stride_vt, stride_vh, stride_dqt,
              stride_dqh, stride_dkt, stride_dkh, stride_dvt, stride_dvh, qk_scale, sm_scale,
              q_s, k_s, v_s, do_s, x_s, y_s, pd_s, bars, H: gl.constexpr,
              IS_BF16: gl.constexpr, NW: gl.constexpr, CHAINS: gl.constexpr = 2):
    """One chain of the two-chain kernel: tiles vp, vp + n_vp, ... (vp = 2 * program + C) in
    one stage of shared memory, the arithmetic _bwd_kernel's, MMA for MMA. Each input buffer
    takes the next tile's load as soon as its last reader is done: V once it is centred (its
    halves go to X and Y), dO after dV, K after dQ, Q after dK; V and dO complete on one
    barrier, Q and K on another, so the next tile centres V and forms dP before it needs Q and
    K. The gradients leave through X and Y (dV, dQ, then dK in X once dV's store has read it)."""
    BM: gl.constexpr = q_desc.block_type.shape[0]
    HD: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    s_lay: gl.constexpr = mma_layout(BM, NW)
    o_lay: gl.constexpr = mma_layout(HD, NW)
    r_lay: gl.constexpr = row_layout(NW)
    vp = CHAINS * gl.program_id(0) + C
    n_vp = CHAINS * gl.num_programs(0)
    n_my = (n_tiles - vp + n_vp - 1) // n_vp
    start, n, h = _tile_at(gl.minimum(vp, n_tiles - 1), tile_start, tile_len, H)
    nx_start, nx_n, nx_h = _tile_at(gl.minimum(vp + n_vp, n_tiles - 1), tile_start, tile_len, H)
    bar_vo = bars.index(2 * C)
    bar_qk = bars.index(2 * C + 1)
    _load_pair(v_desc, do_desc, start.to(gl.int32), h * HD, bar_vo, v_s.index(C),
               do_s.index(C), n_my > 0)
    _load_pair(k_desc, q_desc, start.to(gl.int32), h * HD, bar_qk, k_s.index(C), q_s.index(C),
               n_my > 0)
    for i in range(n_my):
        t = vp + i * n_vp
        more = i + 1 < n_my
        nrow = nx_start.to(gl.int32)
        # j is always C, but varies per tile as far as the compiler knows: with fixed buffers
        # it hoisted every MMA's shared-memory descriptor out of the loop (368 B of spills)
        j = C + (n < 0).to(gl.int32)
        qb = q_s.index(j)
        kb = k_s.index(j)
        vb = v_s.index(j)
        dob = do_s.index(j)
        xb = x_s.index(j)
        yb = y_s.index(j)
        hi_s = pd_s.index(2 * j)  # P's hi half, then dS's
        lo_s = pd_s.index(2 * j + 1)
        nn_start, nn_n, nn_h = _tile_at(gl.minimum(t + 2 * n_vp, n_tiles - 1), tile_start,
                                        tile_len, H)
        mbarrier.wait(bar_vo, i & 1)
        if n > 0:
            if n < BM:
                _zero_rows(vb, n, r_lay)
                _zero_rows(dob, n, r_lay)
            vhi, vlo = _centred_split(vb, V, start, n, h, stride_vt, stride_vh, r_lay, dtype)
            tma.store_wait(pendings=0)  # the last tile's dQ and dK have left X and Y
            xb.store(vhi)
            yb.store(vlo)
            fence_async_shared()
            mbarrier.expect(bar_vo, 2 * v_desc.block_type.nbytes, pred=more)
            tma.async_copy_global_to_shared(v_desc, [nrow, nx_h * HD], bar_vo, vb, more)
            zs = gl.zeros([BM, BM], gl.float32, s_lay)
            dp = warpgroup_mma(dob, yb.permute((1, 0)), zs, use_acc=False, is_async=True)
            dp = warpgroup_mma(dob, xb.permute((1, 0)), dp, is_async=True)
            mbarrier.wait(bar_qk, i & 1)
            if n < BM:
                _zero_rows(qb, n, r_lay)
                _zero_rows(kb, n, r_lay)
                fence_async_shared()
            sc = warpgroup_mma(qb, kb.permute((1, 0)), zs, use_acc=False, is_async=True)
            dp, sc = warpgroup_mma_wait(0, deps=[dp, sc])
            p, dpd = _probs_and_ds(sc, dp, n, qk_scale, s_lay)  # dS = p (dP - Di)
            ds_a, ds_b, dscale = _ds_factors(p, dpd, sm_scale, IS_BF16)
            phi, plo = _split(p, dtype)
            hi_s.store(phi)
            lo_s.store(plo)
            fence_async_shared()
            zo = gl.zeros([BM, HD], gl.float32, o_lay)
            dv = warpgroup_mma(lo_s.permute((1, 0)), dob, zo, use_acc=False, is_async=True)
            dv = warpgroup_mma(hi_s.permute((1, 0)), dob, dv, is_async=True)
            # dS is split before _put's branch (under dV's MMAs): in one basic block with dS's
            # product the compiler fuses fp16's lo = dS - hi into one fma, as in _bwd_kernel;
            # after it, not, and dQ, dK lose bitwise equality (bf16: _split_product's own fma)
            dshi, dslo = _split_product(ds_a, ds_b, dtype)
            dv = warpgroup_mma_wait(0, deps=[dv])
            tma.async_copy_global_to_shared(do_desc, [nrow, nx_h * HD], bar_vo, dob, more)
            _put(dv.to(dtype), xb, dv_desc, DV, start, n, h, stride_dvt, stride_dvh, r_lay)
            hi_s.store(dshi)
            lo_s.store(dslo)
            fence_async_shared()
            dq = warpgroup_mma(lo_s, kb, zo, use_acc=False, is_async=True)
            dq = warpgroup_mma(hi_s, kb, dq, is_async=True)
            dk = warpgroup_mma(lo_s.permute((1, 0)), qb, zo, use_acc=False, is_async=True)
            dk = warpgroup_mma(hi_s.permute((1, 0)), qb, dk, is_async=True)
            dq = warpgroup_mma_wait(2, deps=[dq])
            mbarrier.expect(bar_qk, 2 * k_desc.block_type.nbytes, pred=more)
            tma.async_copy_global_to_shared(k_desc, [nrow, nx_h * HD], bar_qk, kb, more)
            _put((dq * dscale).to(dtype), yb, dq_desc, DQ, start, n, h, stride_dqt, stride_dqh,
                 r_lay)
            dk = warpgroup_mma_wait(0, deps=[dk])
            tma.async_copy_global_to_shared(q_desc, [nrow, nx_h * HD], bar_qk, qb, more)
            tma.store_wait(pendings=1)  # dV's store has read X
            _put((dk * dscale).to(dtype), xb, dk_desc, DK, start, n, h, stride_dkt, stride_dkh,
                 r_lay)
        else:
            mbarrier.wait(bar_qk, i & 1)
            _load_pair(v_desc, do_desc, nrow, nx_h * HD, bar_vo, vb, dob, more)
            _load_pair(k_desc, q_desc, nrow, nx_h * HD, bar_qk, kb, qb, more)
        start, n, h = nx_start, nx_n, nx_h
        nx_start, nx_n, nx_h = nn_start, nn_n, nn_h
    tma.store_wait(pendings=0)


@gluon.jit
def _bwd_kernel_chains(q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, V, DQ, DK,
                       DV, tile_start, tile_len, n_tiles, stride_vt, stride_vh, stride_dqt,
                       stride_dqh, stride_dkt, stride_dkh, stride_dvt, stride_dvh, qk_scale,
                       sm_scale, H: gl.constexpr, IS_BF16: gl.constexpr, CHAINS: gl.constexpr,
                       WORKER_REGS: gl.constexpr, num_warps: gl.constexpr):
    """CHAINS chains of _consumer per CTA, each in its own one stage of shared memory (112 KB at
    D = 128, 64 KB at D = 64). Two (issue 23's lever): the default warpgroup and a worker
    warpgroup under warp_specialize, interleaved by the warp schedulers. One (the lean kernel):
    the chain alone, small enough for three CTAs per SM at D = 64."""
    BM: gl.constexpr = q_desc.block_type.shape[0]
    HD: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    lay: gl.constexpr = q_desc.layout
    q_s = gl.allocate_shared_memory(dtype, [CHAINS, BM, HD], lay)
    k_s = gl.allocate_shared_memory(dtype, [CHAINS, BM, HD], lay)
    v_s = gl.allocate_shared_memory(dtype, [CHAINS, BM, HD], lay)
    do_s = gl.allocate_shared_memory(dtype, [CHAINS, BM, HD], lay)
    x_s = gl.allocate_shared_memory(dtype, [CHAINS, BM, HD], lay)
    y_s = gl.allocate_shared_memory(dtype, [CHAINS, BM, HD], lay)
    pp_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BM], dtype)
    pd_s = gl.allocate_shared_memory(dtype, [2 * CHAINS, BM, BM], pp_lay)  # per chain: P, dS
    bars = gl.allocate_shared_memory(gl.int64, [2 * CHAINS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2 * CHAINS):
        mbarrier.init(bars.index(i), count=1)
    if CHAINS == 2:
        gl.warp_specialize([
            (_consumer, (0, q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, V, DQ,
                         DK, DV, tile_start, tile_len, n_tiles, stride_vt, stride_vh,
                         stride_dqt, stride_dqh, stride_dkt, stride_dkh, stride_dvt, stride_dvh,
                         qk_scale, sm_scale, q_s, k_s, v_s, do_s, x_s, y_s, pd_s, bars, H,
                         IS_BF16, num_warps, CHAINS)),
            (_consumer, (1, q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, V, DQ,
                         DK, DV, tile_start, tile_len, n_tiles, stride_vt, stride_vh,
                         stride_dqt, stride_dqh, stride_dkt, stride_dkh, stride_dvt, stride_dvh,
                         qk_scale, sm_scale, q_s, k_s, v_s, do_s, x_s, y_s, pd_s, bars, H,
                         IS_BF16, num_warps, CHAINS)),
        ], [num_warps], [WORKER_REGS])
    else:
        _consumer(0, q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, V, DQ, DK, DV,
                  tile_start, tile_len, n_tiles, stride_vt, stride_vh, stride_dqt, stride_dqh,
                  stride_dkt, stride_dkh, stride_dvt, stride_dvh, qk_scale, sm_scale, q_s, k_s,
                  v_s, do_s, x_s, y_s, pd_s, bars, H, IS_BF16, num_warps, CHAINS)
    for i in gl.static_range(2 * CHAINS):
        mbarrier.invalidate(bars.index(i))


# ----------------------------------------------------------------------------- eligibility


# Each entry is a same-run measurement at shape P (docs/design.md, "The Gluon kernels"). Head
# dims this path is the default for under BLOCKATTN_KERNEL_PATH=auto, with programs per SM:
CONFIGS: dict[int, int] = {128: 1}  # the H100's D = 64 was slower than portable
GPU_CONFIGS: dict[str, dict[int, int]] = {"H200": {64: 2}}  # per GPU name substring, over CONFIGS
HEAD_DIMS = (64, 128)  # what the kernel compiles for (shared memory: 192 KB at D = 128)
PROGRAMS_PER_SM = {64: 2, 128: 1}  # launch default (CONFIGS overrides where it names the dim)
# Chains per CTA, per GPU: 1 = _bwd_kernel, 2 = _bwd_kernel_chains (two warpgroups, one stage
# each; 8 warps at 255 registers fill the SM)
GPU_CHAINS: dict[str, dict[int, int]] = {"H200": {128: 2}}
WORKER_REGS = 248  # setmaxnreg of the second warpgroup (the default one keeps 255)
# Where one chain runs as _bwd_kernel_chains (one stage: 64 KB at D = 64) instead of
# _bwd_kernel, per GPU; LEAN_CONFIGS: {head dim: (CTAs per SM, register cap)}: three CTAs of
# 128 threads fit under 168 registers (65,536 / 384, rounded down to ptxas' 8).
GPU_LEAN: dict[str, tuple[int, ...]] = {"H200": (64,)}
LEAN_CONFIGS: dict[int, tuple[int, int | None]] = {64: (3, 168), 128: (2, None)}


def unsupported(q: Tensor, sinu_pos: Tensor | None, block_size: int, centred: bool) -> str | None:
    """Why this path cannot run these inputs, or None (arch and TMA layout checked by the
    caller)."""
    if sinu_pos is not None:
        return "rotary (sinu_pos): the fused-rotary kernel is attention_gluon_rotary"
    if not centred:
        return "only the centred backward is implemented on the Gluon path"
    if q.dtype not in (torch.bfloat16, torch.float16):
        return f"q.dtype={q.dtype} (it takes bfloat16 and float16)"
    if q.shape[2] not in HEAD_DIMS:
        return f"head dim {q.shape[2]} (it compiles for {HEAD_DIMS})"
    if not 32 < block_size <= BLOCK:
        return f"block_size={block_size} (its tiles are {BLOCK} rows: 33..64)"
    return None


@functools.cache
def _device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def _per_gpu(device: torch.device, base: dict[int, int],
             per_gpu: dict[str, dict[int, int]]) -> dict[int, int]:
    """`base` updated by the entries of `per_gpu` whose key is in `device`'s name."""
    out = dict(base)
    if device.type == "cuda":
        name = _device_name(device.index if device.index is not None
                            else torch.cuda.current_device())
        for key, extra in per_gpu.items():
            if key in name:
                out.update(extra)
    return out


def chains(device: torch.device) -> dict[int, int]:
    """{head dim: chains per CTA} where the two-chain kernel is the default on `device`;
    BLOCKATTN_GLUON_CHAINS=1|2 sets it for every head dim (the mutants and tests of the
    two-chain kernel on a GPU where it is not the default)."""
    forced = _forced()
    if forced:
        return dict.fromkeys(HEAD_DIMS, 2 if forced == "2" else 1)
    return _per_gpu(device, {}, GPU_CHAINS)


def _forced() -> str:
    forced = os.environ.get("BLOCKATTN_GLUON_CHAINS", "")
    if forced not in ("", "1", "2", "lean"):
        raise ValueError(f"BLOCKATTN_GLUON_CHAINS={forced!r}: expected 1, 2 or lean")
    return forced


def lean(device: torch.device) -> tuple[int, ...]:
    """The head dims where one chain runs alone in _bwd_kernel_chains (lean) on `device`."""
    forced = _forced()
    if forced:
        return HEAD_DIMS if forced == "lean" else ()
    return tuple(_per_gpu(device, {}, {k: dict.fromkeys(d, 1) for k, d in GPU_LEAN.items()}))


def configs(device: torch.device) -> dict[int, int]:
    """{head dim: programs per SM} where this path is the default on `device`."""
    return _per_gpu(device, CONFIGS, GPU_CONFIGS)


# ----------------------------------------------------------------------------- launcher


def _desc(t: Tensor, lay) -> TensorDescriptor:
    T, H, D = t.shape
    return TensorDescriptor(t, [T, H * D], [t.stride(0), 1], [BLOCK, D], lay)


def launch_operands(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor,
                    grads: tuple[Tensor, Tensor, Tensor]) -> tuple[tuple, tuple]:
    """The Gluon backward kernels' leading arguments, shared with attention_gluon_rotary:
    (TMA descriptors of q, k, v, dO, dQ, dK, dV, then V, DQ, DK, DV), and the row and head
    strides of V, DQ, DK, DV."""
    dq, dk, dv = grads
    dtype = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    lay = gl.NVMMASharedLayout.get_default_for([BLOCK, q.shape[2]], dtype)
    tensors = (*(_desc(t, lay) for t in (q, k, v, grad_out, dq, dk, dv)), v, dq, dk, dv)
    strides = tuple(s for t in (v, dq, dk, dv) for s in (t.stride(0), t.stride(1)))
    return tensors, strides


def launch_bwd(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor,
               grads: tuple[Tensor, Tensor, Tensor], table: TileTable,
               scale: float, n_chains: int | str | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) into `grads`; inputs are eligible (see dispatch.gluon_bwd). `n_chains`
    (1, 2 or "lean") overrides chains(device) and lean(device), the measured defaults."""
    if n_chains not in (None, 1, 2, "lean"):
        raise ValueError(f"n_chains={n_chains!r}: expected 1, 2 or 'lean'")
    T, H, D = q.shape
    n_tiles = table.n_slots * H
    if n_tiles == 0 or T == 0:  # nothing to write (a TMA box needs rows)
        return grads
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    tensors, strides = launch_operands(q, k, v, grad_out, grads)
    args = (*tensors, table.start, table.length, n_tiles, *strides, scale * LOG2E, scale)
    bf16 = q.dtype == torch.bfloat16
    if (n_chains if n_chains is not None else chains(q.device).get(D, 1)) == 2:
        grid = min((n_tiles + 1) // 2, sms)
        _bwd_kernel_chains[(grid,)](*args, H=H, IS_BF16=bf16, CHAINS=2, WORKER_REGS=WORKER_REGS,
                                    num_warps=4)
    elif n_chains == "lean" or (n_chains is None and D in lean(q.device)):
        per_sm, cap = LEAN_CONFIGS[D]
        _bwd_kernel_chains[(min(n_tiles, sms * per_sm),)](
            *args, H=H, IS_BF16=bf16, CHAINS=1, WORKER_REGS=0, num_warps=4,
            **({"maxnreg": cap} if cap else {}))
    else:
        grid = min(n_tiles, sms * configs(q.device).get(D, PROGRAMS_PER_SM[D]))
        _bwd_kernel[(grid,)](*args, H=H, IS_BF16=bf16, num_warps=4)
    return grads


