"""Hopper (sm_90) fused-rotary backward in Gluon: attention_gluon's backward design (TMA loads
under mbarriers, persistent tiles) with q, k (and V, rotate_v) rotated once per tile in
registers and the gradients rotated back in the MMA accumulator's own layout.

Reads top-down: helpers, the kernel, eligibility, the launcher.

Why (issue 23): the portable rotary backward took 1.9x the plain one (H100, D = 128). Its
TTGIR converts layouts 21 times per tile: the sin/cos tables are loaded coalesced and moved to
the rotation's layout, the rotated-back gradients moved back before the store. Here each table
is read straight into the layout its use needs (two global reads per use, L1/L2 hits: the
table is shared by a block's heads), so no rotation moves a tile between layouts:
- q, k and V leave shared memory in a row-contiguous layout whose interleaved pairs (2i, 2i+1)
  sit in one thread; they are rotated in fp32 there, split into hi + lo halves once and go back
  to shared memory as the MMAs' operands (hi in place of the raw tile, lo beside it), reused by
  S, dQ and dK (dP for V);
- dQ, dK (and dV) are rotated back in the wgmma accumulator layout, where each thread holds
  both columns of a pair too, then rounded and staged for the TMA store.

The arithmetic is the portable rotary backward's (tile_math._bwd_body, centred): S from the
split rotated q and k (3 MMAs), dP = dO (V - m)^T with V rotated and m the mean of its n valid
rows (or, without rotate_v, the plain V minus its first row), dS = P (dP - Di) with Di summed
twice, dV = P^T dO, dQ = dS K, dK = dS^T Q with P and dS as hi + lo, the MMAs of each product
in _mma_split's order (lo terms first). fp16 splits dS at a power-of-two scale.

One chain per CTA (_bwd_rot_kernel, persistent over the tiles), two CTAs per SM at D = 128 and
three at D = 64 (PROGRAMS_PER_SM; 168 registers, MAX_REGISTERS); the MMAs are
issued asynchronously with the same tile's ALU work under them (q's rotation under dP, dS's
split under dV, dQ's rotate-back and store under dK). Why one chain per CTA (issue 23,
2026-11-26, results/h200_2026-11-26f): the two-chain kernel it replaced ran two warpgroups
under warp_specialize, and each partition is its own copy of the code (10.6 k SASS
instructions, ~170 KB): Nsight Compute put 33 % of its warp-stall samples on instruction
fetch (no_inst). Two CTAs of one chain run one copy (5.2 k): 5 %, and the time fell from 6.66
to 4.96 ms (H200, shape P, bf16, D = 128, rotate_v).

The default 16-bit fused-rotary backward on sm_90 (CONFIGS; fp16 since 2026-11-27). Same-run A/B
against the portable rotary backward, shape P, bf16, ms: H200 D = 128 4.96 vs 7.04 (rotate_v),
4.42 vs 6.08 (q/k only), D = 64 2.75 vs 3.12, 2.56 vs 2.89; H100 D = 128 5.75 vs 7.00, 4.85 vs
6.14, D = 64 2.79 vs 3.28, 2.56 vs 3.02. Fused rotary is still 1.6-1.8x the plain backward, not
the issue's 1.35x (bench medians at 8b0f580, bf16 splits in PTX: 1.76x on the H200, 1.38x on the
H100). Stage profile (full / compute-only / memory-only, D = 128, rotate_v): this kernel on the
H100 (5fab869) 5.87 / 4.45 / 3.75 ms against the plain 3.73 / 3.43 / 3.46; a close variant on
the H200 (ac41322) 5.40 / 4.56 / 2.85 against 2.79 / 2.24 / 2.42. Its compute alone outlasts the
plain kernel: it executes 2.0x the plain kernel's instructions per tile (the rotation and hi/lo
split of q, k, V and the rotate-back of three gradients that the accuracy rule asks for) at
about the plain kernel's issue rate, and overlaps its loads less well (each input buffer is free
only late in the tile).
Gluon has no interpreter: off an sm_90 GPU this path never runs (dispatch falls back) and the
CPU tests compile it ahead of time for sm_90.
"""

from __future__ import annotations

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

from blockattn.kernels import attention_gluon as G
from blockattn.kernels.attention_gluon import (
    LOG2E,
    _centred_split,
    _ds_factors,
    _load_pair,
    _probs_and_ds,
    _put,
    _split,
    _split_product,
    _tile_at,
    _widen,
    _zero_rows,
)
from blockattn.kernels.tiles import TileTable

# ----------------------------------------------------------------------------- helpers


@gluon.jit
def _table(SIN, start, n, stride_st, lay: gl.constexpr, BM: gl.constexpr, HALF: gl.constexpr):
    """(BM, HALF) fp32 sin and cos of the tile's tokens in layout `lay` (rows >= n: 0)."""
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, lay))
    cols = gl.arange(0, HALF, layout=gl.SliceLayout(0, lay))
    # min(rows, n - 1) (rows >= n are masked) varies per tile, so the compiler keeps these
    # offsets out of registers held across the tile loop (hoisted, they spilled at D = 128 and
    # cost the D = 64 backward the registers three CTAs per SM need)
    offs = gl.minimum(rows, n - 1) * stride_st
    ptrs = (SIN + start.to(gl.int64) * stride_st + gl.expand_dims(offs, 1)
            + gl.expand_dims(cols, 0))
    mask = gl.expand_dims(rows < n, 1) & gl.expand_dims(cols < HALF, 0)
    sin = gl.load(ptrs, mask=mask, other=0.0).to(gl.float32)
    cos = gl.load(ptrs + HALF, mask=mask, other=0.0).to(gl.float32)
    return sin, cos


@gluon.jit
def _rotate(x, sin, cos, CONJ: gl.constexpr):
    """Rotary of fp32 x (BM, D) on interleaved pairs, in x's own layout (each thread holds both
    columns of a pair), by sin/cos read in the pairs' layout (_table); CONJ: the transpose."""
    BM: gl.constexpr = x.shape[0]
    HD: gl.constexpr = x.shape[1]
    x0, x1 = gl.split(gl.reshape(x, [BM, HD // 2, 2]))
    if CONJ:
        y0 = x0 * cos + x1 * sin
        y1 = x1 * cos - x0 * sin
    else:
        y0 = x0 * cos - x1 * sin
        y1 = x1 * cos + x0 * sin
    return gl.convert_layout(gl.reshape(gl.join(y0, y1), [BM, HD]), x.type.layout)


@gluon.jit
def _rotate_split(buf, lo_buf, sin, cos, lay: gl.constexpr, n, CENTRE: gl.constexpr):
    """The raw tile in `buf` rotated (and, CENTRE, minus the mean of its n valid rows; padded
    rows stay 0), split into hi (written over the raw tile) and lo (to `lo_buf`)."""
    x = _rotate(_widen(buf.load(lay)), sin, cos, False)
    if CENTRE:
        rows = gl.arange(0, x.shape[0], layout=gl.SliceLayout(1, lay))
        m = gl.sum(x, axis=0) / gl.maximum(n, 1).to(gl.float32)
        x = gl.where(gl.expand_dims(rows < n, 1), x - gl.expand_dims(m, 0), 0.0)
    hi, lo = _split(x, buf.dtype)
    buf.store(hi)
    lo_buf.store(lo)


@gluon.jit
def _scores_to_ds(q_hi, q_lo, k_hi, k_lo, dp, n, qk_scale, sm_scale, s_lay: gl.constexpr,
                  IS_BF16: gl.constexpr):
    """S from the rotated q, k halves in shared memory (q_lo k_hi + q_hi k_lo + q_hi k_hi:
    _mma_split's order), then P and dS (_probs_and_ds). Returns P, dS as the two factors
    _split_product takes and the gradients' scale (_ds_factors: fp16 scales dS by a power of
    two)."""
    BM: gl.constexpr = q_hi.shape[0]
    zs = gl.zeros([BM, BM], gl.float32, s_lay)
    sc = warpgroup_mma(q_lo, k_hi.permute((1, 0)), zs, use_acc=False)
    sc = warpgroup_mma(q_hi, k_lo.permute((1, 0)), sc)
    sc = warpgroup_mma(q_hi, k_hi.permute((1, 0)), sc)
    p, dpd = _probs_and_ds(sc, dp, n, qk_scale, s_lay)
    ds_a, ds_b, dscale = _ds_factors(p, dpd, sm_scale, IS_BF16)
    return p, ds_a, ds_b, dscale


@gluon.jit
def _emit(x, sin, cos, buf, desc, base, start, n, h, stride_t, stride_h, ROTATE: gl.constexpr,
          r_lay: gl.constexpr):
    """A finished fp32 gradient, rotated back (ROTATE) in its own layout, rounded and stored
    through `buf` (attention_gluon._put: TMA for a full tile, masked rows for a partial one)."""
    if ROTATE:
        x = _rotate(x, sin, cos, True)
    _put(x.to(buf.dtype), buf, desc, base, start, n, h, stride_t, stride_h, r_lay)


@gluon.jit
def _bwd_rot_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, V, DQ, DK, DV,
                    SIN, tile_start, tile_len, n_tiles, stride_vt, stride_vh, stride_dqt,
                    stride_dqh, stride_dkt, stride_dkh, stride_dvt, stride_dvh, stride_st,
                    qk_scale, sm_scale, H: gl.constexpr, IS_BF16: gl.constexpr,
                    ROTATE_V: gl.constexpr, num_warps: gl.constexpr):
    """Tiles p, p + P, ... (p = program, P = programs: two per SM) in five (BM, D) buffers and
    the P/dS pair. A, B, C, D take q, k, V, dO by TMA. V is rotated (or centred) into C (hi)
    and the P/dS pair (lo) for dP, whose MMAs run while q is rotated into A/E (hi/lo); then k
    into B/C, reused with q's halves by S, dQ and dK. dV leaves through D (dO's), dQ through
    C, dK through E; each input buffer takes the next tile's load once its last reader is
    done: K after dQ, Q after dK, V and dO once dV's and dQ's stores have read D and C."""
    BM: gl.constexpr = q_desc.block_type.shape[0]
    HD: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    lay: gl.constexpr = q_desc.layout
    s_lay: gl.constexpr = G.mma_layout(BM, num_warps)
    o_lay: gl.constexpr = G.mma_layout(HD, num_warps)
    r_lay: gl.constexpr = G.row_layout(num_warps)
    rp, _ = gl.split(gl.reshape(gl.zeros([BM, HD], gl.float32, r_lay), [BM, HD // 2, 2]))
    op, _ = gl.split(gl.reshape(gl.zeros([BM, HD], gl.float32, o_lay), [BM, HD // 2, 2]))
    rp_lay: gl.constexpr = rp.type.layout
    op_lay: gl.constexpr = op.type.layout
    a_s = gl.allocate_shared_memory(dtype, [1, BM, HD], lay)
    b_s = gl.allocate_shared_memory(dtype, [1, BM, HD], lay)
    c_s = gl.allocate_shared_memory(dtype, [1, BM, HD], lay)
    d_s = gl.allocate_shared_memory(dtype, [1, BM, HD], lay)
    e_s = gl.allocate_shared_memory(dtype, [1, BM, HD], lay)
    pd_s = gl.allocate_shared_memory(dtype, [2, BM, BM], lay)  # P, then dS: hi, lo
    PER: gl.constexpr = 2 * BM // HD  # (BM, D) tiles in the P/dS pair's bytes: 1 (D=128), 2
    pd_tiles = pd_s._reinterpret(dtype, [PER, BM, HD], lay)
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(bars.index(i), count=1)
    vp = gl.program_id(0)
    n_vp = gl.num_programs(0)
    n_my = (n_tiles - vp + n_vp - 1) // n_vp
    start, n, h = _tile_at(gl.minimum(vp, n_tiles - 1), tile_start, tile_len, H)
    bar_vo = bars.index(0)
    bar_qk = bars.index(1)
    _load_pair(v_desc, do_desc, start.to(gl.int32), h * HD, bar_vo, c_s.index(0), d_s.index(0),
               n_my > 0)
    _load_pair(k_desc, q_desc, start.to(gl.int32), h * HD, bar_qk, b_s.index(0), a_s.index(0),
               n_my > 0)
    for i in range(n_my):
        t = vp + i * n_vp
        more = i + 1 < n_my
        # j is always 0; varying per tile as far as the compiler knows, it keeps the MMAs'
        # shared-memory descriptors out of registers across the loop (attention_gluon)
        j = (n < 0).to(gl.int32)
        ab = a_s.index(j)
        bb = b_s.index(j)
        cb = c_s.index(j)
        db = d_s.index(j)
        eb = e_s.index(j)
        hi_s = pd_s.index(2 * j)
        lo_s = pd_s.index(2 * j + 1)
        pd_t = pd_tiles.index(j)  # the P/dS pair as one (BM, D) tile: V's lo
        # the next tile's coordinates, for its loads at the end of this one
        nx_start, nx_n, nx_h = _tile_at(gl.minimum(t + n_vp, n_tiles - 1), tile_start, tile_len,
                                        H)
        nrow = nx_start.to(gl.int32)
        sin_r, cos_r = _table(SIN, start, n, stride_st, rp_lay, BM, HD // 2)
        mbarrier.wait(bar_vo, i & 1)
        if n > 0:
            if n < BM:
                _zero_rows(cb, n, r_lay)
                _zero_rows(db, n, r_lay)
            if ROTATE_V:
                _rotate_split(cb, pd_t, sin_r, cos_r, r_lay, n, True)
            else:
                vhi, vlo = _centred_split(cb, V, start, n, h, stride_vt, stride_vh, r_lay, dtype)
                cb.store(vhi)
                pd_t.store(vlo)
            fence_async_shared()
            zs = gl.zeros([BM, BM], gl.float32, s_lay)
            dp = warpgroup_mma(db, pd_t.permute((1, 0)), zs, use_acc=False, is_async=True)
            dp = warpgroup_mma(db, cb.permute((1, 0)), dp, is_async=True)
            mbarrier.wait(bar_qk, i & 1)
            if n < BM:
                _zero_rows(ab, n, r_lay)
                _zero_rows(bb, n, r_lay)
            tma.store_wait(pendings=0)  # the last tile's dK has left E
            _rotate_split(ab, eb, sin_r, cos_r, r_lay, n, False)  # q, while dP multiplies
            dp = warpgroup_mma_wait(0, deps=[dp])
            _rotate_split(bb, cb, sin_r, cos_r, r_lay, n, False)  # k: its lo over V's hi
            fence_async_shared()
            p, ds_a, ds_b, dscale = _scores_to_ds(ab, eb, bb, cb, dp, n, qk_scale, sm_scale,
                                                  s_lay, IS_BF16)
            phi, plo = _split(p, dtype)
            hi_s.store(phi)
            lo_s.store(plo)
            fence_async_shared()
            zo = gl.zeros([BM, HD], gl.float32, o_lay)
            dv = warpgroup_mma(lo_s.permute((1, 0)), db, zo, use_acc=False, is_async=True)
            dv = warpgroup_mma(hi_s.permute((1, 0)), db, dv, is_async=True)
            dshi, dslo = _split_product(ds_a, ds_b, dtype)  # while dV multiplies
            dv = warpgroup_mma_wait(0, deps=[dv])
            if HD == 128:  # the o-layout table: here, measured faster at D = 128 (see below)
                sin_o, cos_o = _table(SIN, start, n, stride_st, op_lay, BM, HD // 2)
            hi_s.store(dshi)
            lo_s.store(dslo)
            fence_async_shared()
            dq = warpgroup_mma(lo_s, bb, zo, use_acc=False, is_async=True)
            dq = warpgroup_mma(hi_s, cb, dq, is_async=True)
            dq = warpgroup_mma(hi_s, bb, dq, is_async=True)
            if HD != 128:
                # D = 64: once dS's halves have left registers (loaded above, it is live with
                # them and dV: 24 B spilled under the 168-register cap); at D = 128 this
                # position took 1.023x / 1.084x the time (H200 A/B, rotate_v / q, k only)
                sin_o, cos_o = _table(SIN, start, n, stride_st, op_lay, BM, HD // 2)
            _emit(dv, sin_o, cos_o, db, dv_desc, DV, start, n, h, stride_dvt, stride_dvh,
                  ROTATE_V, r_lay)  # while dQ multiplies; dO is dead
            dq = warpgroup_mma_wait(0, deps=[dq])
            mbarrier.expect(bar_qk, 2 * k_desc.block_type.nbytes, pred=more)
            tma.async_copy_global_to_shared(k_desc, [nrow, nx_h * HD], bar_qk, bb, more)
            dk = warpgroup_mma(lo_s.permute((1, 0)), ab, zo, use_acc=False, is_async=True)
            dk = warpgroup_mma(hi_s.permute((1, 0)), eb, dk, is_async=True)
            dk = warpgroup_mma(hi_s.permute((1, 0)), ab, dk, is_async=True)
            _emit(dq * dscale, sin_o, cos_o, cb, dq_desc, DQ, start, n, h, stride_dqt,
                  stride_dqh, True, r_lay)  # while dK multiplies; k's lo is dead
            dk = warpgroup_mma_wait(0, deps=[dk])
            tma.async_copy_global_to_shared(q_desc, [nrow, nx_h * HD], bar_qk, ab, more)
            tma.store_wait(pendings=0)  # dV's and dQ's stores have read D and C
            _load_pair(v_desc, do_desc, nrow, nx_h * HD, bar_vo, cb, db, more)
            _emit(dk * dscale, sin_o, cos_o, eb, dk_desc, DK, start, n, h, stride_dkt,
                  stride_dkh, True, r_lay)
        else:
            mbarrier.wait(bar_qk, i & 1)
            tma.store_wait(pendings=0)
            _load_pair(v_desc, do_desc, nrow, nx_h * HD, bar_vo, cb, db, more)
            _load_pair(k_desc, q_desc, nrow, nx_h * HD, bar_qk, bb, ab, more)
        start, n, h = nx_start, nx_n, nx_h
    tma.store_wait(pendings=0)
    for i in gl.static_range(2):
        mbarrier.invalidate(bars.index(i))


# ----------------------------------------------------------------------------- eligibility


def unsupported(q: Tensor, sinu_pos: Tensor, block_size: int, centred: bool) -> str | None:
    """Why this path cannot run these rotary inputs, or None: the plain Gluon backward's
    conditions (attention_gluon.unsupported) and a table with unit stride along D (arch and TMA
    layout checked by the caller)."""
    if sinu_pos.stride(1) != 1:
        return "sinu_pos needs unit stride along D"
    return G.unsupported(q, None, block_size, centred)


# ----------------------------------------------------------------------------- launcher

# {head dim: CTAs per SM}: D = 128 takes ~250 registers and ~100 KB of shared memory (two fit);
# D = 64 57-59 KB and, capped by MAX_REGISTERS, 168 registers (three fit: bf16, shape P, H200
# A/B against two CTAs of 198-202 registers, 0.959x rotate_v, 0.923x q/k only;
# results/h200_2026-11-27c/ab_bwd_d64_three_ctas).
PROGRAMS_PER_SM: dict[int, int] = {128: 2, 64: 3}
# {head dim: ptxas register cap (maxnreg)}: uncapped, the D = 64 builds take 161-242 registers
# (two CTAs per SM); at 168 they spill 0 B (compile-check builds them with the cap).
MAX_REGISTERS: dict[int, int] = {64: 168}
# {dtype: head dims} where `auto` sends a fused-rotary backward here on sm_90
# (dispatch.gluon_bwd): bf16 and fp16 at both head dims, measured faster than the portable
# rotary backward, rotate_v on and off. bf16 on the H100 and the H200 (H200 D128 4.96 against
# 7.04 ms rotate_v, 4.42 against 6.08 q/k only). fp16 since 2026-11-27 (H200, shape P, same run,
# 0 elements apart: D128 5.155 against 6.823 ms rotate_v, 4.585 against 5.814 q/k only; D64,
# at three CTAs per SM, 2.615 against 3.085, 2.430 against 2.884;
# results/h200_2026-11-27c/ab_paths_fp16_9a95554); on 2026-11-26 the portable kernel had been as
# fast (D128 5.01 against 5.02 ms rotate_v; results/h200_2026-11-26f).
CONFIGS: dict[torch.dtype, tuple[int, ...]] = {torch.bfloat16: (64, 128),
                                               torch.float16: (64, 128)}
# ptxas spills per thread accepted, {(dtype, head dim, rotate_v): bytes}; compile-check gates
# every build not named here at 0 B. None: every build spills 0 B (sm_90). Before 2026-11-26's
# twelfth session the D = 128 builds spilled 4-40 B: row offsets (rows * stride) the compiler
# hoisted out of the tile loop (the table's and the partial-tile stores', now
# min(rows, n - 1) * stride: n varies per tile), and dV's rotate-back, whose o-layout table, dV
# and dS's halves were live at once (now under dQ's MMAs, once dS is in shared memory).
ACCEPTED_SPILL_BYTES: dict[tuple[str, int, bool], int] = {}


def launch_bwd(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor,
               grads: tuple[Tensor, Tensor, Tensor], table: TileTable, sinu_pos: Tensor,
               scale: float, rotate_v: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) w.r.t. the un-rotated q, k, v into `grads`; inputs are eligible."""
    T, H, _ = q.shape
    n_tiles = table.n_slots * H
    if n_tiles == 0 or T == 0:  # nothing to write (a TMA box needs rows)
        return grads
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    tensors, strides = G.launch_operands(q, k, v, grad_out, grads)
    args = (*tensors, sinu_pos, table.start, table.length, n_tiles, *strides, sinu_pos.stride(0),
            scale * LOG2E, scale)
    D = q.shape[2]
    _bwd_rot_kernel[(min(n_tiles, PROGRAMS_PER_SM[D] * sms),)](
        *args, H=H, IS_BF16=q.dtype == torch.bfloat16, ROTATE_V=rotate_v, num_warps=4,
        **({"maxnreg": MAX_REGISTERS[D]} if D in MAX_REGISTERS else {}))
    return grads
