"""Hopper (sm_90) kernels of the fast precision mode (`precision="fast"`) in Gluon: the Gluon
fused-rotary forward and backward (attention_gluon_rotary_fwd, attention_gluon_rotary) without
the hi/lo split, and the same backward without rotary (the plain fast backward).

Reads top-down: helpers, the forward, the backward, eligibility, launchers.

The arithmetic is the portable kernels' fast mode (tile_math._flags(fast=True): SPLIT and
CENTRED off), operation for operation, and the accuracy model is fp32-rounded-operands
(ERROR_ANALYSIS.md §2):
- q, k (and V, rotate_v) rotated in fp32 in registers and rounded once to the input dtype
  (round to nearest even), in place in shared memory, as the one operand of their MMAs;
- S = q k^T (one MMA), P = softmax over the n valid keys in fp32 (attention_gluon._probs);
- forward: O = P V with P rounded to the input dtype, one MMA;
- backward: dP = dO V^T with V itself (not centred), Di = rowsum(P dP) in one pass,
  dS = P (dP - Di) in fp32, then dV = P^T dO, dQ = dS K, dK = dS^T Q with P and dS rounded
  to the input dtype, one MMA each; the gradients rotated back in fp32 in the accumulator's
  layout (attention_gluon_rotary._emit) and rounded once at the store.
Only the MMAs' summation order may differ from the portable kernels'.

The buffers and the loads in flight follow the accurate kernels (their docstrings say why);
the lo buffers are gone. Gluon has no interpreter: off an sm_90 GPU the portable fast kernels
run (dispatch), and the CPU tests compile these ahead of time for sm_90.
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
from blockattn.kernels import attention_gluon_rotary as GR
from blockattn.kernels.attention_gluon import (
    LOG2E,
    _load_pair,
    _probs,
    _put,
    _tile_at,
    _widen,
    _zero_rows,
)
from blockattn.kernels.attention_gluon_rotary import _emit, _rotate, _table
from blockattn.kernels.tiles import TileTable

# ----------------------------------------------------------------------------- helpers


@gluon.jit
def _rotate_round(buf, sin, cos, lay: gl.constexpr):
    """The raw tile in `buf` rotated in fp32 (attention_gluon_rotary._rotate) and rounded once
    to its dtype (round to nearest even), written over the raw tile."""
    x = _rotate(_widen(buf.load(lay)), sin, cos, False)
    buf.store(x.to(buf.dtype))


@gluon.jit
def _n_slot_major(n_tiles, vp, n_vp, S: gl.constexpr):
    """How many tiles program vp of n_vp walks when each takes all S heads of a slot in turn
    (slots vp, vp + n_vp, ...), so the slot's sin/cos rows are read again by the same SM (same-
    run A/B on an H200: D128 bwd 0.953x, fwd 0.977x); S = 1: tiles vp, vp + n_vp, ..."""
    return ((n_tiles // S - vp + n_vp - 1) // n_vp) * S


@gluon.jit
def _slot_major(i, vp, n_vp, S: gl.constexpr):
    """The i-th of those tiles (t = slot * H + head)."""
    return (i // S * n_vp + vp) * S + i % S


# ----------------------------------------------------------------------------- forward


@gluon.jit
def _fwd_fast_kernel(q_desc, k_desc, v_desc, o_desc, O, SIN, tile_start, tile_len, n_tiles,
                     stride_ot, stride_oh, stride_st, qk_scale, H: gl.constexpr,
                     ROTATE_V: gl.constexpr, num_warps: gl.constexpr):
    """Tiles p, p + P, ... (p = program, P = programs). A, B, C take q, k, V by TMA and hold
    them rotated and rounded; P goes to its own buffer, O leaves through E."""
    BM: gl.constexpr = q_desc.block_type.shape[0]
    HD: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    lay: gl.constexpr = q_desc.layout
    s_lay: gl.constexpr = G.mma_layout(BM, num_warps)
    o_lay: gl.constexpr = G.mma_layout(HD, num_warps)
    r_lay: gl.constexpr = G.row_layout(num_warps)
    rp, _ = gl.split(gl.reshape(gl.zeros([BM, HD], gl.float32, r_lay), [BM, HD // 2, 2]))
    rp_lay: gl.constexpr = rp.type.layout
    a_s = gl.allocate_shared_memory(dtype, [BM, HD], lay)  # q
    b_s = gl.allocate_shared_memory(dtype, [BM, HD], lay)  # k
    c_s = gl.allocate_shared_memory(dtype, [BM, HD], lay)  # V
    e_s = gl.allocate_shared_memory(dtype, [BM, HD], lay)  # O for its store
    p_s = gl.allocate_shared_memory(dtype, [BM, BM], lay)  # P
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(bars.index(i), count=1)
    bar_qk = bars.index(0)
    bar_v = bars.index(1)
    vp = gl.program_id(0)
    n_vp = gl.num_programs(0)
    n_my = _n_slot_major(n_tiles, vp, n_vp, H)
    start, n, h = _tile_at(gl.minimum(_slot_major(0, vp, n_vp, H), n_tiles - 1), tile_start,
                           tile_len, H)
    _load_pair(q_desc, k_desc, start.to(gl.int32), h * HD, bar_qk, a_s, b_s, n_my > 0)
    mbarrier.expect(bar_v, v_desc.block_type.nbytes, pred=n_my > 0)
    tma.async_copy_global_to_shared(v_desc, [start.to(gl.int32), h * HD], bar_v, c_s, n_my > 0)
    sin, cos = _table(SIN, start, n, stride_st, rp_lay, BM, HD // 2)
    for i in range(n_my):
        t_next = _slot_major(i + 1, vp, n_vp, H)
        more = i + 1 < n_my
        nx_start, nx_n, nx_h = _tile_at(gl.minimum(t_next, n_tiles - 1), tile_start, tile_len,
                                        H)
        nrow = nx_start.to(gl.int32)
        mbarrier.wait(bar_qk, i & 1)
        if n > 0:
            _rotate_round(a_s, sin, cos, r_lay)
            _rotate_round(b_s, sin, cos, r_lay)
            fence_async_shared()
            zs = gl.zeros([BM, BM], gl.float32, s_lay)
            sc = warpgroup_mma(a_s, b_s.permute((1, 0)), zs, use_acc=False, is_async=True)
            mbarrier.wait(bar_v, i & 1)  # V rotated while S multiplies
            if n < BM:
                _zero_rows(c_s, n, r_lay)
            if ROTATE_V:
                _rotate_round(c_s, sin, cos, r_lay)
            fence_async_shared()
            sin, cos = _table(SIN, nx_start, nx_n, stride_st, rp_lay, BM, HD // 2)
            sc = warpgroup_mma_wait(0, deps=[sc])
            _load_pair(q_desc, k_desc, nrow, nx_h * HD, bar_qk, a_s, b_s, more)
            p = _probs(sc, n, qk_scale, s_lay)
            p_s.store(p.to(dtype))
            fence_async_shared()
            zo = gl.zeros([BM, HD], gl.float32, o_lay)
            o = warpgroup_mma(p_s, c_s, zo, use_acc=False, is_async=True)
            o = warpgroup_mma_wait(0, deps=[o])
            mbarrier.expect(bar_v, v_desc.block_type.nbytes, pred=more)
            tma.async_copy_global_to_shared(v_desc, [nrow, nx_h * HD], bar_v, c_s, more)
            tma.store_wait(pendings=0)  # the last tile's O has left E
            _put(o.to(dtype), e_s, o_desc, O, start, n, h, stride_ot, stride_oh, r_lay)
        else:
            sin, cos = _table(SIN, nx_start, nx_n, stride_st, rp_lay, BM, HD // 2)
            mbarrier.wait(bar_v, i & 1)
            _load_pair(q_desc, k_desc, nrow, nx_h * HD, bar_qk, a_s, b_s, more)
            mbarrier.expect(bar_v, v_desc.block_type.nbytes, pred=more)
            tma.async_copy_global_to_shared(v_desc, [nrow, nx_h * HD], bar_v, c_s, more)
        start, n, h = nx_start, nx_n, nx_h
    tma.store_wait(pendings=0)
    for i in gl.static_range(2):
        mbarrier.invalidate(bars.index(i))


# ----------------------------------------------------------------------------- backward


@gluon.jit
def _bwd_fast_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, dk_desc, dv_desc, V, DQ, DK, DV,
                     SIN, tile_start, tile_len, n_tiles, stride_vt, stride_vh, stride_dqt,
                     stride_dqh, stride_dkt, stride_dkh, stride_dvt, stride_dvh, stride_st,
                     qk_scale, sm_scale, H: gl.constexpr, ROTARY: gl.constexpr,
                     ROTATE_V: gl.constexpr, num_warps: gl.constexpr):
    """Tiles p, p + P, ... in five (BM, D) buffers and the P/dS pair. A, B, C, D take q, k, V,
    dO by TMA; V (rotate_v) is rotated and rounded in C for dP, whose MMA runs while q is
    rotated in A; then k in B. dV leaves through D (dO's), dQ through C (V's), dK through E;
    each input buffer takes the next tile's load once its last reader is done. ROTARY off:
    the plain fast backward (q, k, V as loaded, gradients not rotated back)."""
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
    # The rotate-back table (accumulator layout) is loaded before S's MMA at D = 64, its latency
    # hidden under S and the softmax (same-run A/B on an H200: rotary bwd 0.966x); at D = 128
    # after dQ's MMA, where holding it from S on cost 1.029x (results/h200_2026-11-28f)
    EARLY_TABLE: gl.constexpr = HD == 64
    a_s = gl.allocate_shared_memory(dtype, [1, BM, HD], lay)
    b_s = gl.allocate_shared_memory(dtype, [1, BM, HD], lay)
    c_s = gl.allocate_shared_memory(dtype, [1, BM, HD], lay)
    d_s = gl.allocate_shared_memory(dtype, [1, BM, HD], lay)
    e_s = gl.allocate_shared_memory(dtype, [1, BM, HD], lay)
    pd_s = gl.allocate_shared_memory(dtype, [2, BM, BM], lay)  # P, dS
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(bars.index(i), count=1)
    vp = gl.program_id(0)
    n_vp = gl.num_programs(0)
    S: gl.constexpr = H if ROTARY else 1  # slot-major with rotary (the table is read per tile)
    n_my = _n_slot_major(n_tiles, vp, n_vp, S)
    start, n, h = _tile_at(gl.minimum(_slot_major(0, vp, n_vp, S), n_tiles - 1), tile_start,
                           tile_len, H)
    bar_vo = bars.index(0)
    bar_qk = bars.index(1)
    _load_pair(v_desc, do_desc, start.to(gl.int32), h * HD, bar_vo, c_s.index(0), d_s.index(0),
               n_my > 0)
    _load_pair(k_desc, q_desc, start.to(gl.int32), h * HD, bar_qk, b_s.index(0), a_s.index(0),
               n_my > 0)
    for i in range(n_my):
        t_next = _slot_major(i + 1, vp, n_vp, S)
        more = i + 1 < n_my
        j = (n < 0).to(gl.int32)  # always 0 (see attention_gluon_rotary)
        ab = a_s.index(j)
        bb = b_s.index(j)
        cb = c_s.index(j)
        db = d_s.index(j)
        eb = e_s.index(j)
        p_b = pd_s.index(2 * j)
        ds_b = pd_s.index(2 * j + 1)
        nx_start, nx_n, nx_h = _tile_at(gl.minimum(t_next, n_tiles - 1), tile_start, tile_len,
                                        H)
        nrow = nx_start.to(gl.int32)
        if ROTARY:
            sin_r, cos_r = _table(SIN, start, n, stride_st, rp_lay, BM, HD // 2)
        mbarrier.wait(bar_vo, i & 1)
        if n > 0:
            if n < BM:
                _zero_rows(cb, n, r_lay)
                _zero_rows(db, n, r_lay)
            if ROTATE_V:
                _rotate_round(cb, sin_r, cos_r, r_lay)
            fence_async_shared()
            zs = gl.zeros([BM, BM], gl.float32, s_lay)
            dp = warpgroup_mma(db, cb.permute((1, 0)), zs, use_acc=False, is_async=True)
            mbarrier.wait(bar_qk, i & 1)
            if n < BM:
                _zero_rows(ab, n, r_lay)
                _zero_rows(bb, n, r_lay)
            if ROTARY:
                _rotate_round(ab, sin_r, cos_r, r_lay)  # q, while dP multiplies
            dp = warpgroup_mma_wait(0, deps=[dp])
            if ROTARY:
                _rotate_round(bb, sin_r, cos_r, r_lay)
                if EARLY_TABLE:
                    sin_o, cos_o = _table(SIN, start, n, stride_st, op_lay, BM, HD // 2)
            fence_async_shared()
            sc = warpgroup_mma(ab, bb.permute((1, 0)), zs, use_acc=False)
            p = _probs(sc, n, qk_scale, s_lay)
            ds = p * (dp - gl.expand_dims(gl.sum(p * dp, axis=1), 1))  # Di in one pass
            p_b.store(p.to(dtype))
            fence_async_shared()
            zo = gl.zeros([BM, HD], gl.float32, o_lay)
            dv = warpgroup_mma(p_b.permute((1, 0)), db, zo, use_acc=False, is_async=True)
            ds_b.store(ds.to(dtype))  # while dV multiplies (dV reads P's buffer only)
            fence_async_shared()
            dv = warpgroup_mma_wait(0, deps=[dv])
            dq = warpgroup_mma(ds_b, bb, zo, use_acc=False, is_async=True)
            if ROTARY:
                if not EARLY_TABLE:
                    sin_o, cos_o = _table(SIN, start, n, stride_st, op_lay, BM, HD // 2)
            else:  # unused: nothing is rotated back
                sin_o = dv
                cos_o = dv
            _emit(dv, sin_o, cos_o, db, dv_desc, DV, start, n, h, stride_dvt, stride_dvh,
                  ROTATE_V, r_lay)  # while dQ multiplies; dO is dead
            dq = warpgroup_mma_wait(0, deps=[dq])
            mbarrier.expect(bar_qk, 2 * k_desc.block_type.nbytes, pred=more)
            tma.async_copy_global_to_shared(k_desc, [nrow, nx_h * HD], bar_qk, bb, more)
            dk = warpgroup_mma(ds_b.permute((1, 0)), ab, zo, use_acc=False, is_async=True)
            _emit(dq * sm_scale, sin_o, cos_o, cb, dq_desc, DQ, start, n, h, stride_dqt,
                  stride_dqh, ROTARY, r_lay)  # while dK multiplies; V is dead
            dk = warpgroup_mma_wait(0, deps=[dk])
            tma.async_copy_global_to_shared(q_desc, [nrow, nx_h * HD], bar_qk, ab, more)
            tma.store_wait(pendings=0)  # dV's, dQ's and the last dK's stores are done
            _load_pair(v_desc, do_desc, nrow, nx_h * HD, bar_vo, cb, db, more)
            _emit(dk * sm_scale, sin_o, cos_o, eb, dk_desc, DK, start, n, h, stride_dkt,
                  stride_dkh, ROTARY, r_lay)
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


def unsupported(q: Tensor, sinu_pos: Tensor | None, block_size: int) -> str | None:
    """Why these kernels cannot run these inputs, or None: the accurate Gluon rotary kernels'
    conditions (16-bit, D 64 or 128, 64-token blocks, a table with unit stride along D; arch
    and TMA layout checked by the caller)."""
    if sinu_pos is not None:
        return GR.unsupported(q, sinu_pos, block_size, True)
    return G.unsupported(q, None, block_size, True)


# ----------------------------------------------------------------------------- launchers

# {(kernel, rotary, head dim): (CTAs per SM, ptxas register cap or None)}; the head dims and
# kernels here are where `auto` sends a fast-mode launch on sm_90 (dispatch); absent: the
# portable fast kernels.
CONFIGS: dict[tuple[str, bool, int], tuple[int, int | None]] = {
    ("fwd", True, 128): (2, None),
    ("fwd", True, 64): (3, 168),
    ("bwd", True, 128): (2, None),
    ("bwd", True, 64): (3, 168),
    ("bwd", False, 128): (2, None),
    ("bwd", False, 64): (3, 168),
}


def launch_fwd(q: Tensor, k: Tensor, v: Tensor, o: Tensor, table: TileTable, sinu_pos: Tensor,
               scale: float, rotate_v: bool) -> Tensor:
    """O into `o` (fused rotary); inputs are eligible (see dispatch)."""
    T, H, D = q.shape
    n_tiles = table.n_slots * H
    if n_tiles == 0 or T == 0:  # nothing to write (a TMA box needs rows)
        return o
    ctas, cap = CONFIGS.get(("fwd", True, D), (2, None))
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    dtype = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    lay = gl.NVMMASharedLayout.get_default_for([G.BLOCK, D], dtype)
    descs = tuple(G._desc(t, lay) for t in (q, k, v, o))
    _fwd_fast_kernel[(min(n_tiles, ctas * sms),)](
        *descs, o, sinu_pos, table.start, table.length, n_tiles, o.stride(0), o.stride(1),
        sinu_pos.stride(0), scale * LOG2E, H=H, ROTATE_V=rotate_v, num_warps=4,
        **({"maxnreg": cap} if cap else {}))
    return o


def launch_bwd(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor,
               grads: tuple[Tensor, Tensor, Tensor], table: TileTable, sinu_pos: Tensor | None,
               scale: float, rotate_v: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) w.r.t. the un-rotated q, k, v into `grads`; inputs are eligible."""
    T, H, D = q.shape
    n_tiles = table.n_slots * H
    if n_tiles == 0 or T == 0:
        return grads
    rotary = sinu_pos is not None
    ctas, cap = CONFIGS.get(("bwd", rotary, D), (2, None))
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    tensors, strides = G.launch_operands(q, k, v, grad_out, grads)
    sin = sinu_pos if rotary else q  # a dummy pointer without rotary
    args = (*tensors, sin, table.start, table.length, n_tiles, *strides,
            sinu_pos.stride(0) if rotary else 0, scale * LOG2E, scale)
    _bwd_fast_kernel[(min(n_tiles, ctas * sms),)](
        *args, H=H, ROTARY=rotary, ROTATE_V=rotary and rotate_v, num_warps=4,
        **({"maxnreg": cap} if cap else {}))
    return grads
