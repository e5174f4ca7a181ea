"""Hopper (sm_90) fused-rotary backward in Gluon: the rotation and hi/lo split of each operand
formed once per tile, in the layout its MMA reads, and nowhere else.

Reads top-down: helpers, the kernel, eligibility, the launcher.

Why (issue 23): the portable rotary backward lets Triton place the fp32 rotation and hi/lo split
of q and k, and it rematerialises them once per MMA operand layout (16 layout conversions
against 5 without rotary) and spills 448 B per thread at D = 128 (compile-check, sm_90). Here
each operand is formed once: q and k rotated, split and stored to shared memory, where every
MMA that needs them reads them; V rotated, centred and split straight into the registers of
the MMA's A operand.

Everything works on (64, 64) panels: a D = 128 tile is two panels of 64 columns. A rotary pair
(2i, 2i+1) never straddles a panel, so each panel rotates on its own, every fp32 temporary is
32 registers, and every MMA has N = 64. The backward is computed transposed (keys as rows):
S^T = K Q^T, P^T = softmax over its rows, dP^T = (V - m) dO^T with V's halves as A operands
in registers (no shared memory for V), dV = P^T dO, dK = dS^T Q with P^T and dS^T as register A
operands, and only dQ = dS K reads dS from shared memory. Shared memory per CTA: q and k hi/lo
(4 x 8 KB each), dO (2 x 8 KB), dS hi/lo (2 x 8 KB): 96 KB, two CTAs per SM.

The arithmetic is the portable centred rotary backward's (attention.py's docstring): rotated
q, k (and V with rotate_v) in fp32, split hi + lo, lo x lo dropped; rotated V centred on its
valid rows' mean (plain V on its first row); Di summed twice; fp16 dS split at a power-of-two
scale; gradients rotated back (transpose rotation) in fp32 before the one rounding. Sums run in
another order (keys as rows, K split into panels), so the outputs are not bitwise the portable
kernel's; tests/kernels/test_gluon_path.py compares the two on the GPU.

Loads are masked row loads (no TMA): rows past a tile's n valid tokens load as 0, as in the
portable kernel. Gluon has no interpreter: off an sm_90 GPU this path never runs.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

from blockattn.kernels.tiles import TileTable

BLOCK = gl.constexpr(64)  # rows of a tile: one warpgroup MMA's M
PANEL = gl.constexpr(64)  # columns of a panel
LOG2E = 1.4426950408889634

# ----------------------------------------------------------------------------- helpers


@gluon.jit
def _grid(start, n, h, stride_t, stride_h, col0, lay: gl.constexpr):
    """Element offsets (int64) of a (BLOCK, PANEL) panel at column col0 of head h, its row mask
    (rows < n) and its columns within the head."""
    rows = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, lay))
    cols = col0 + gl.arange(0, PANEL, layout=gl.SliceLayout(0, lay))
    tok = (start + rows).to(gl.int64)
    offs = gl.expand_dims(tok * stride_t + h * stride_h, 1) + gl.expand_dims(cols, 0)
    mask = gl.expand_dims(rows < n, 1) & gl.expand_dims(cols >= 0, 0)
    return offs, mask, cols


@gluon.jit
def _sin_cos(SIN, start, n, stride_st, cols, lay: gl.constexpr, HALF: gl.constexpr):
    """fp32 sin and cos of each element's pair (column // 2), rows of tokens start + r."""
    rows = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, lay))
    base = gl.expand_dims((start + rows).to(gl.int64) * stride_st, 1)
    pair = gl.expand_dims(cols // 2, 0)
    mask = gl.expand_dims(rows < n, 1) & (pair >= 0)
    sin = gl.load(SIN + base + pair, mask=mask, other=0.0).to(gl.float32)
    cos = gl.load(SIN + base + HALF + pair, mask=mask, other=0.0).to(gl.float32)
    return sin, cos


@gluon.jit
def _pair_sin_cos(SIN, start, n, stride_st, col0, like, HALF: gl.constexpr):
    """fp32 sin and cos of a panel's (BLOCK, PANEL // 2) pairs, in the layout of `like` (one
    half of the split pairs; its layout is taken inside: a split's layout cannot be passed)."""
    pl: gl.constexpr = like.type.layout
    rows = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, pl))
    pair = col0 // 2 + gl.arange(0, PANEL // 2, layout=gl.SliceLayout(0, pl))
    base = gl.expand_dims((start + rows).to(gl.int64) * stride_st, 1)
    mask = gl.expand_dims(rows < n, 1) & gl.expand_dims(pair >= 0, 0)
    sin = gl.load(SIN + base + gl.expand_dims(pair, 0), mask=mask, other=0.0)
    cos = gl.load(SIN + base + HALF + gl.expand_dims(pair, 0), mask=mask, other=0.0)
    return sin.to(gl.float32), cos.to(gl.float32)


@gluon.jit
def _rotated(X, SIN, start, n, h, stride_t, stride_h, stride_st, col0, lay: gl.constexpr,
             HALF: gl.constexpr, GATHER: gl.constexpr):
    """The fp32 rotated (BLOCK, PANEL) panel of X (rows >= n are 0),
    (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin) on each interleaved pair.
    GATHER: in layout `lay`, each element loaded with its partner (column ^ 1, a second load)
    and its pair's sin/cos; else loaded row-contiguous in `lay`, whose threads hold whole
    pairs, and split into the pairs' halves (one load of X, one sin/cos per pair)."""
    offs, mask, cols = _grid(start, n, h, stride_t, stride_h, col0, lay)
    x = gl.load(X + offs, mask=mask, other=0.0).to(gl.float32)
    if GATHER:
        partner = offs - gl.expand_dims(cols, 0) + gl.expand_dims(cols ^ 1, 0)
        xp = gl.load(X + partner, mask=mask, other=0.0).to(gl.float32)
        sin, cos = _sin_cos(SIN, start, n, stride_st, cols, lay, HALF)
        odd = gl.expand_dims((cols & 1) == 1, 0)
        xr = gl.where(odd, x * cos + xp * sin, x * cos - xp * sin)
    else:
        x0, x1 = gl.split(gl.reshape(x, [BLOCK, PANEL // 2, 2]))
        sin, cos = _pair_sin_cos(SIN, start, n, stride_st, col0, x0, HALF)
        xr = gl.reshape(gl.join(x0 * cos - x1 * sin, x1 * cos + x0 * sin), [BLOCK, PANEL])
    return xr


@gluon.jit
def _split(x, dtype: gl.constexpr):
    """fp32 x ~= hi + lo, both in dtype (round to nearest even)."""
    hi = x.to(dtype)
    lo = (x - hi.to(gl.float32)).to(dtype)
    return hi, lo


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
def _put(x, OUT, SIN, start, n, h, stride_t, stride_h, stride_st, col0, ROTATE: gl.constexpr,
         lay: gl.constexpr, HALF: gl.constexpr):
    """Store the fp32 gradient panel x (an MMA accumulator), first rotated back (the transpose
    rotation, (g0, g1) -> (g0 cos + g1 sin, g1 cos - g0 sin)) if ROTATE; the pair partners sit
    in one thread's registers, so the rotation is a reshape and split."""
    if ROTATE:
        g0, g1 = gl.split(gl.reshape(x, [BLOCK, PANEL // 2, 2]))
        sin, cos = _pair_sin_cos(SIN, start, n, stride_st, col0, g0, HALF)
        x = gl.reshape(gl.join(g0 * cos + g1 * sin, g1 * cos - g0 * sin), [BLOCK, PANEL])
    y = gl.convert_layout(x.to(OUT.dtype.element_ty), lay)
    offs, mask, _ = _grid(start, n, h, stride_t, stride_h, col0, lay)
    gl.store(OUT + offs, y, mask=mask)


# ----------------------------------------------------------------------------- kernel


@gluon.jit
def _bwd_rot_kernel(Q, K, V, DO, DQ, DK, DV, SIN, tile_start, tile_len, n_tiles,
                    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                    stride_dot, stride_doh, stride_dqt, stride_dqh, stride_dkt, stride_dkh,
                    stride_dvt, stride_dvh, stride_st, qk_scale, sm_scale,
                    H: gl.constexpr, HEAD_DIM: gl.constexpr, ROTATE_V: gl.constexpr,
                    IS_BF16: gl.constexpr, GATHER: gl.constexpr, num_warps: gl.constexpr):
    NP: gl.constexpr = HEAD_DIM // PANEL
    HALF: gl.constexpr = HEAD_DIM // 2
    dtype: gl.constexpr = Q.dtype.element_ty
    sh: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK, PANEL], dtype)
    q_s = gl.allocate_shared_memory(dtype, [2 * NP, BLOCK, PANEL], sh)  # panel p: hi 2p, lo 2p+1
    k_s = gl.allocate_shared_memory(dtype, [2 * NP, BLOCK, PANEL], sh)
    do_s = gl.allocate_shared_memory(dtype, [NP, BLOCK, PANEL], sh)
    ds_s = gl.allocate_shared_memory(dtype, [2, BLOCK, BLOCK], sh)  # dS^T hi, lo
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, PANEL, 16])
    a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2)
    r_l: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])

    t = gl.program_id(0)
    blk = t // H
    h = t % H
    start = gl.load(tile_start + blk)
    n = gl.load(tile_len + blk)
    if n > 0:
        # q and k rotated and split once; dO as loaded
        for p in gl.static_range(NP):
            hi, lo = _split(_rotated(K, SIN, start, n, h, stride_kt, stride_kh, stride_st,
                                     p * PANEL, r_l, HALF, GATHER), dtype)
            k_s.index(2 * p).store(hi)
            k_s.index(2 * p + 1).store(lo)
            hi, lo = _split(_rotated(Q, SIN, start, n, h, stride_qt, stride_qh, stride_st,
                                     p * PANEL, r_l, HALF, GATHER), dtype)
            q_s.index(2 * p).store(hi)
            q_s.index(2 * p + 1).store(lo)
            offs, mask, _ = _grid(start, n, h, stride_dot, stride_doh, p * PANEL, r_l)
            do_s.index(p).store(gl.load(DO + offs, mask=mask, other=0.0))
        fence_async_shared()
        # S^T = K Q^T (keys as rows), lo x lo dropped
        st = gl.zeros([BLOCK, BLOCK], gl.float32, acc_l)
        for p in gl.static_range(NP):
            st = warpgroup_mma(k_s.index(2 * p), q_s.index(2 * p + 1).permute((1, 0)), st)
            st = warpgroup_mma(k_s.index(2 * p + 1), q_s.index(2 * p).permute((1, 0)), st)
            st = warpgroup_mma(k_s.index(2 * p), q_s.index(2 * p).permute((1, 0)), st)
        keys = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, acc_l))
        valid = gl.expand_dims(keys < n, 1)
        st = gl.where(valid, st * qk_scale, float("-inf"))  # log2 domain
        pt = gl.exp2(st - gl.expand_dims(gl.max(st, axis=0), 0))
        pt = pt / gl.expand_dims(gl.sum(pt, axis=0), 0)
        # dP^T = (V - m) dO^T, V's halves as A-operand registers, panel by panel. GATHER: formed
        # in that layout; else loaded row-contiguous and their halves converted to it.
        v_l: gl.constexpr = a_l if GATHER else r_l
        dpt = gl.zeros([BLOCK, BLOCK], gl.float32, acc_l)
        for p in gl.static_range(NP):
            if ROTATE_V:
                vr = _rotated(V, SIN, start, n, h, stride_vt, stride_vh, stride_st, p * PANEL,
                              v_l, HALF, GATHER)
                m = gl.sum(vr, axis=0) / gl.maximum(n, 1).to(gl.float32)  # padded rows are 0
                rows = gl.arange(0, BLOCK, layout=gl.SliceLayout(1, vr.type.layout))
                vc = gl.where(gl.expand_dims(rows < n, 1), vr - gl.expand_dims(m, 0), 0.0)
            else:  # plain V minus its block's first row (padded rows become -row0, finite)
                offs, mask, cols = _grid(start, n, h, stride_vt, stride_vh, p * PANEL, v_l)
                v = gl.load(V + offs, mask=mask, other=0.0).to(gl.float32)
                row0 = gl.load(V + start.to(gl.int64) * stride_vt + h * stride_vh + cols)
                vc = v - gl.expand_dims(row0.to(gl.float32), 0)
            vhi, vlo = _split(vc, dtype)
            vhi = gl.convert_layout(vhi, a_l)
            vlo = gl.convert_layout(vlo, a_l)
            dpt = warpgroup_mma(vlo, do_s.index(p).permute((1, 0)), dpt)
            dpt = warpgroup_mma(vhi, do_s.index(p).permute((1, 0)), dpt)
        # Di summed twice over each query's column (see attention.py), dS^T = P^T (dP^T - Di)
        dpt = dpt - gl.expand_dims(gl.sum(pt * dpt, axis=0), 0)
        dst = pt * (dpt - gl.expand_dims(gl.sum(pt * dpt, axis=0), 0))
        dscale = sm_scale
        if not IS_BF16:  # fp16: dS's lo half kept in the normal range (as attention.py)
            up, down = _pow2_scale(gl.max(gl.max(gl.abs(dst), axis=1), axis=0), 14)
            dst = dst * up
            dscale = sm_scale * down
        # dV = P^T dO
        phi, plo = _split(pt, dtype)
        phi = gl.convert_layout(phi, a_l)
        plo = gl.convert_layout(plo, a_l)
        for p in gl.static_range(NP):
            acc = gl.zeros([BLOCK, PANEL], gl.float32, acc_l)
            acc = warpgroup_mma(plo, do_s.index(p), acc)
            acc = warpgroup_mma(phi, do_s.index(p), acc)
            _put(acc, DV, SIN, start, n, h, stride_dvt, stride_dvh, stride_st, p * PANEL,
                 ROTATE_V, r_l, HALF)
        # dK = dS^T Q, dS^T as register A operand
        dshi, dslo = _split(dst, dtype)
        ds_s.index(0).store(dshi)
        ds_s.index(1).store(dslo)
        ahi = gl.convert_layout(dshi, a_l)
        alo = gl.convert_layout(dslo, a_l)
        for p in gl.static_range(NP):
            acc = gl.zeros([BLOCK, PANEL], gl.float32, acc_l)
            acc = warpgroup_mma(alo, q_s.index(2 * p), acc)
            acc = warpgroup_mma(ahi, q_s.index(2 * p + 1), acc)
            acc = warpgroup_mma(ahi, q_s.index(2 * p), acc)
            _put(acc * dscale, DK, SIN, start, n, h, stride_dkt, stride_dkh, stride_st,
                 p * PANEL, True, r_l, HALF)
        # dQ = dS K, dS read transposed from shared memory
        fence_async_shared()
        for p in gl.static_range(NP):
            acc = gl.zeros([BLOCK, PANEL], gl.float32, acc_l)
            acc = warpgroup_mma(ds_s.index(1).permute((1, 0)), k_s.index(2 * p), acc)
            acc = warpgroup_mma(ds_s.index(0).permute((1, 0)), k_s.index(2 * p + 1), acc)
            acc = warpgroup_mma(ds_s.index(0).permute((1, 0)), k_s.index(2 * p), acc)
            _put(acc * dscale, DQ, SIN, start, n, h, stride_dqt, stride_dqh, stride_st,
                 p * PANEL, True, r_l, HALF)


# ----------------------------------------------------------------------------- eligibility

HEAD_DIMS = (64, 128)
GATHER = False  # how operands are loaded and rotated (see _rotated); A/B: ab_gluon_rotary.py
CTAS_PER_SM = 2  # the design: two chains per SM, one per CTA (compile-check gates it)
# Head dims this path is the default for under BLOCKATTN_KERNEL_PATH=auto, per GPU (a substring
# of torch.cuda.get_device_name): entered only where a same-run device measurement showed it
# faster than the portable rotary backward at shape P.
GPU_CONFIGS: dict[str, tuple[int, ...]] = {}


def configs(device: torch.device) -> tuple[int, ...]:
    """Head dims where this path is the default on `device`."""
    if device.type != "cuda":
        return ()
    name = _device_name(device.index if device.index is not None else torch.cuda.current_device())
    return tuple(d for key, dims in GPU_CONFIGS.items() if key in name for d in dims)


@functools.cache
def _device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def unsupported(q: Tensor, sinu_pos: Tensor | None, block_size: int, centred: bool) -> str | None:
    """Why this path cannot run these inputs, or None (arch checked by the caller)."""
    if sinu_pos is None:
        return "no rotary (sinu_pos is None): the plain Gluon path takes it"
    if not centred:
        return "only the centred backward is implemented on the Gluon rotary path"
    if q.dtype not in (torch.bfloat16, torch.float16):
        return f"q.dtype={q.dtype} (it takes bfloat16 and float16)"
    if q.shape[2] not in HEAD_DIMS:
        return f"head dim {q.shape[2]} (it compiles for {HEAD_DIMS})"
    if not 32 < block_size <= BLOCK:
        return f"block_size={block_size} (its tiles are {BLOCK} rows: 33..64)"
    return None


# ----------------------------------------------------------------------------- launcher


def launch_bwd(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor, table: TileTable,
               sinu_pos: Tensor, scale: float, rotate_v: bool,
               grads: tuple[Tensor, Tensor, Tensor],
               gather: bool = GATHER) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) into `grads`; inputs are eligible (unsupported() is None), last dims
    contiguous. `gather` picks how operands are loaded and rotated (see _rotated)."""
    _, H, D = q.shape
    dq, dk, dv = grads
    n_tiles = table.n_slots * H
    if n_tiles == 0:
        return dq, dk, dv
    _bwd_rot_kernel[(n_tiles,)](
        q, k, v, grad_out, dq, dk, dv, sinu_pos, table.start, table.length, n_tiles,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        grad_out.stride(0), grad_out.stride(1), dq.stride(0), dq.stride(1),
        dk.stride(0), dk.stride(1), dv.stride(0), dv.stride(1), sinu_pos.stride(0),
        scale * LOG2E, scale,
        H=H, HEAD_DIM=D, ROTATE_V=rotate_v, IS_BF16=q.dtype == torch.bfloat16, GATHER=gather,
        num_warps=4,
    )  # fmt: skip
    return dq, dk, dv
