"""Hopper (sm_90) fused-rotary forward in Gluon: the portable rotary forward's arithmetic with
q, k and V rotated once per tile in registers, their hi + lo halves in shared memory as the
MMAs' operands, and the next tile's loads in flight by TMA while this one computes.

Reads top-down: the kernel, eligibility, the launcher (the helpers are attention_gluon's and
attention_gluon_rotary's).

Why (issue 23): the portable rotary forward took 2.04x the plain forward on the H200 (shape P,
bf16, D = 128, bench medians at aff7cfe) and is compute-bound (stage profile at 65e27a0:
compute-only 2.878 ms against 1.732 without the splits); its bf16 D = 128 build spills 40 B
on sm_90. Its rotated operands go from the rotation's layout to the MMA's through shared
memory that the compiler allocates per use; here each one is rotated and split once, in the
layout the backward uses (attention_gluon_rotary._rotate_split: pairs in one thread), and
stored where the MMAs read it.

The arithmetic, operation for operation (tile_math._fwd_probs, _fwd_out with SPLIT):
- q, k (and V, rotate_v) rotated in fp32 and split into hi + lo in the input dtype;
- S = q_lo k_hi^T + q_hi k_lo^T + q_hi k_hi^T (_mma_split's order), P = softmax over the n
  valid keys in fp32 (attention_gluon._probs);
- O = P_lo V_hi (+ P_hi V_lo, rotate_v) + P_hi V_hi, P split into hi + lo; without rotate_v
  V is the raw tile. O is rounded to the input dtype; it is not rotated back.
The outputs are within 1 ulp of the portable kernel's (the rotation's fp32 products may fuse
into FMAs differently), tests/kernels/test_gluon_rotary.py.

Partial blocks: a TMA box always reads 64 rows; V's rows past the tile's n (the next
sequence's, or zero past T) are zeroed in shared memory before any MMA reads them (P is 0 in
those columns, but 0 x NaN is NaN); keys past n get score -inf, and the query rows past n only
reach output rows that are never stored. Full tiles leave by TMA store, partial ones by masked
row stores (attention_gluon._put).

One chain per CTA, persistent over the tiles; the CTAs per SM are PROGRAMS_PER_SM (registers
and shared memory, compile-check gates both). Buffers, (BM, D) each: A, B, C take q, k, V by TMA;
q's lo goes to E, k's to F, V's to G; P's halves to their own pair. S's MMAs run while V is
rotated; the next tile's q, k load once S is done, its V once O is; O leaves through E. The
next tile's sin/cos (read straight into registers, L2 hits after a block's first head) are
loaded once V is rotated, so they arrive under this tile's softmax and O: loaded at the top
of each tile instead, their wait was on the chain (H200 same-run A/B, shape P bf16: D = 128
0.835x / 0.831x the time, rotate_v / q, k only; D = 64 0.980x / 0.962x;
results/h200_2026-11-27b/ab_fwd_variants, which also has P as the O MMAs' register operand:
0.96-0.99x alone, 1-2 % more with the prefetch, but 4 B spilled at D = 64).

Measured against the portable rotary forward it replaces on sm_90 (same-run A/Bs, shape P,
without the table prefetch: results/h200_2026-11-27b/ab_gluon_rotary_fwd,
results/h100_2026-11-27b/ab_gluon_rotary_fwd): H200 bf16 D = 128 0.911x / 0.869x, D = 64 0.880x
/ 0.888x, fp16 0.875-0.953x; H100 bf16 D = 128 1.004x / 0.848x, D = 64 0.891x / 0.894x, fp16
0.889-0.941x. The bf16 D = 128 rotate_v forward was a tie on the H100 there; the portable one
spills 40 B on sm_90, this one 0 B.
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
from blockattn.kernels import attention_gluon_rotary as GR
from blockattn.kernels.attention_gluon import (
    LOG2E,
    _load_pair,
    _probs,
    _put,
    _split,
    _tile_at,
    _zero_rows,
)
from blockattn.kernels.attention_gluon_rotary import _rotate_split, _table
from blockattn.kernels.tiles import TileTable

# ----------------------------------------------------------------------------- kernel


@gluon.jit
def _fwd_rot_kernel(q_desc, k_desc, v_desc, o_desc, O, SIN, tile_start, tile_len, n_tiles,
                    stride_ot, stride_oh, stride_st, qk_scale, H: gl.constexpr,
                    ROTATE_V: gl.constexpr, num_warps: gl.constexpr):
    """Tiles p, p + P, ... (p = program, P = programs) in six (BM, D) buffers and the P pair."""
    BM: gl.constexpr = q_desc.block_type.shape[0]
    HD: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    lay: gl.constexpr = q_desc.layout
    s_lay: gl.constexpr = G.mma_layout(BM, num_warps)
    o_lay: gl.constexpr = G.mma_layout(HD, num_warps)
    r_lay: gl.constexpr = G.row_layout(num_warps)
    rp, _ = gl.split(gl.reshape(gl.zeros([BM, HD], gl.float32, r_lay), [BM, HD // 2, 2]))
    rp_lay: gl.constexpr = rp.type.layout
    a_s = gl.allocate_shared_memory(dtype, [BM, HD], lay)  # q, then q's hi
    b_s = gl.allocate_shared_memory(dtype, [BM, HD], lay)  # k, then k's hi
    c_s = gl.allocate_shared_memory(dtype, [BM, HD], lay)  # V, then V's hi (rotate_v)
    e_s = gl.allocate_shared_memory(dtype, [BM, HD], lay)  # q's lo, then O for its store
    f_s = gl.allocate_shared_memory(dtype, [BM, HD], lay)  # k's lo
    g_s = gl.allocate_shared_memory(dtype, [BM, HD], lay)  # V's lo (rotate_v)
    p_s = gl.allocate_shared_memory(dtype, [2, BM, BM], lay)  # P: hi, lo
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(bars.index(i), count=1)
    bar_qk = bars.index(0)
    bar_v = bars.index(1)
    vp = gl.program_id(0)
    n_vp = gl.num_programs(0)
    n_my = (n_tiles - vp + n_vp - 1) // n_vp
    start, n, h = _tile_at(gl.minimum(vp, n_tiles - 1), tile_start, tile_len, H)
    _load_pair(q_desc, k_desc, start.to(gl.int32), h * HD, bar_qk, a_s, b_s, n_my > 0)
    mbarrier.expect(bar_v, v_desc.block_type.nbytes, pred=n_my > 0)
    tma.async_copy_global_to_shared(v_desc, [start.to(gl.int32), h * HD], bar_v, c_s, n_my > 0)
    sin, cos = _table(SIN, start, n, stride_st, rp_lay, BM, HD // 2)
    for i in range(n_my):
        t = vp + i * n_vp
        more = i + 1 < n_my
        # the next tile's coordinates, for its loads during this one
        nx_start, nx_n, nx_h = _tile_at(gl.minimum(t + n_vp, n_tiles - 1), tile_start, tile_len,
                                        H)
        nrow = nx_start.to(gl.int32)
        mbarrier.wait(bar_qk, i & 1)
        if n > 0:
            tma.store_wait(pendings=0)  # the last tile's O has left E
            _rotate_split(a_s, e_s, sin, cos, r_lay, n, False)
            _rotate_split(b_s, f_s, sin, cos, r_lay, n, False)
            fence_async_shared()
            zs = gl.zeros([BM, BM], gl.float32, s_lay)
            sc = warpgroup_mma(e_s, b_s.permute((1, 0)), zs, use_acc=False, is_async=True)
            sc = warpgroup_mma(a_s, f_s.permute((1, 0)), sc, is_async=True)
            sc = warpgroup_mma(a_s, b_s.permute((1, 0)), sc, is_async=True)
            mbarrier.wait(bar_v, i & 1)  # V rotated while S multiplies
            if n < BM:
                _zero_rows(c_s, n, r_lay)
            if ROTATE_V:
                _rotate_split(c_s, g_s, sin, cos, r_lay, n, False)
            fence_async_shared()
            # the next tile's table, in flight during this one's softmax and O
            sin, cos = _table(SIN, nx_start, nx_n, stride_st, rp_lay, BM, HD // 2)
            sc = warpgroup_mma_wait(0, deps=[sc])
            _load_pair(q_desc, k_desc, nrow, nx_h * HD, bar_qk, a_s, b_s, more)
            p = _probs(sc, n, qk_scale, s_lay)
            phi, plo = _split(p, dtype)
            p_s.index(0).store(phi)
            p_s.index(1).store(plo)
            fence_async_shared()
            zo = gl.zeros([BM, HD], gl.float32, o_lay)
            o = warpgroup_mma(p_s.index(1), c_s, zo, use_acc=False, is_async=True)
            if ROTATE_V:
                o = warpgroup_mma(p_s.index(0), g_s, o, is_async=True)
            o = warpgroup_mma(p_s.index(0), c_s, o, is_async=True)
            o = warpgroup_mma_wait(0, deps=[o])
            mbarrier.expect(bar_v, v_desc.block_type.nbytes, pred=more)
            tma.async_copy_global_to_shared(v_desc, [nrow, nx_h * HD], bar_v, c_s, more)
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


# ----------------------------------------------------------------------------- eligibility


def unsupported(q: Tensor, sinu_pos: Tensor, block_size: int) -> str | None:
    """Why this path cannot run these rotary inputs, or None: the rotary backward's conditions
    (attention_gluon_rotary.unsupported; arch and TMA layout checked by the caller)."""
    return GR.unsupported(q, sinu_pos, block_size, True)


# ----------------------------------------------------------------------------- launcher

# {head dim: CTAs per SM}: D = 128 takes 96-112 KB of shared memory and 222-239 registers (two
# fit), D = 64 64 KB and, capped by MAX_REGISTERS, 168 (three fit; H200 A/B against two CTAs
# without the cap: 0.899x / 0.868x the time, results/h200_2026-11-27b/ab_gluon_rotary_fwd).
PROGRAMS_PER_SM: dict[int, int] = {128: 2, 64: 3}
# {head dim: ptxas register cap (maxnreg)}: without it the bf16 D = 64 rotate_v build takes 185
# registers, which fits two CTAs per SM, not three; at 168 it spills 0 B (compile-check).
MAX_REGISTERS: dict[int, int] = {64: 168}
# {dtype: head dims} where `auto` sends a fused-rotary forward here on sm_90 (dispatch.gluon_fwd):
# every 16-bit config, each measured faster than the portable rotary forward or (bf16 D = 128
# rotate_v on the H100) tied and spill-free (module docstring).
CONFIGS: dict[torch.dtype, tuple[int, ...]] = {torch.bfloat16: (64, 128),
                                               torch.float16: (64, 128)}


def launch_fwd(q: Tensor, k: Tensor, v: Tensor, o: Tensor, table: TileTable, sinu_pos: Tensor,
               scale: float, rotate_v: bool) -> Tensor:
    """O into `o`; inputs are eligible (see dispatch.gluon_fwd)."""
    T, H, D = q.shape
    n_tiles = table.n_slots * H
    if n_tiles == 0 or T == 0:  # nothing to write (a TMA box needs rows)
        return o
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    dtype = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    lay = gl.NVMMASharedLayout.get_default_for([G.BLOCK, D], dtype)
    descs = tuple(G._desc(t, lay) for t in (q, k, v, o))
    _fwd_rot_kernel[(min(n_tiles, PROGRAMS_PER_SM[D] * sms),)](
        *descs, o, sinu_pos, table.start, table.length, n_tiles, o.stride(0), o.stride(1),
        sinu_pos.stride(0), scale * LOG2E, H=H, ROTATE_V=rotate_v, num_warps=4,
        **({"maxnreg": MAX_REGISTERS[D]} if D in MAX_REGISTERS else {}))
    return o
