"""Hopper (sm_90) path: the same tile computation, fed by TMA in a pipelined persistent loop.

Reads top-down: an interpreter shim, the TMA tile loader, the forward and backward kernels,
eligibility, launchers.

Why a second path: the portable kernels (blockattn.kernels.attention) run one tile per program and
rely on resident CTAs for overlap; at 2 CTAs per SM the backward is bound by its dependent chain
(the loads of a tile wait for nothing, but nothing loads while a tile computes). Here each
program walks the tile table with tensor-memory-accelerator (TMA) loads into a shared-memory ring
that Triton's pipeliner fills `num_stages - 1` tiles ahead, and optionally splits the loop into a
producer (TMA) and consumer (MMA + softmax) warp group (`warp_specialize`).

The arithmetic is the portable kernels' own (`_fwd_body`, `_bwd_body`): only the loads differ.
A TMA box always reads BLOCK rows; rows past the tile's n valid tokens belong to the next
sequence (or are zero past T). They are zeroed before any arithmetic, exactly as the portable
masked loads give 0, so non-finite values there never reach this tile's outputs, and the outputs
are stored with the same masked stores.

Measured slower than the portable kernels in every config on an H100 (see CONFIGS), so nothing
dispatches here by default: BLOCKATTN_KERNEL_PATH=hopper or prefer-hopper selects it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.tools.tensor_descriptor import TensorDescriptor

from blockattn.kernels.tile_math import (
    INTERPRET,
    LOG2E,
    _bwd_body,
    _flags,
    _fwd_body,
    _tile_at,
    block_rows,
)
from blockattn.kernels.tiles import TileTable

# ----------------------------------------------------------------------------- interpreter


def _interpreter_loop_bounds() -> None:
    """Under the interpreter, let a runtime loop bound index a range (numpy >= 2.4 refuses
    int() of the 1-element arrays the interpreter wraps scalars in). The portable kernels avoid
    the loop there instead; this path has no loop-free form. Only under TRITON_INTERPRET=1."""
    import triton.runtime.interpreter as interp

    original = interp._patch_lang_tensor
    if getattr(original, "_blockattn_shim", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        tensor.__index__ = lambda self: int(self.handle.data.reshape(-1)[0])

    patched._blockattn_shim = True
    interp._patch_lang_tensor = patched


if INTERPRET:
    _interpreter_loop_bounds()

# ----------------------------------------------------------------------------- loader


@triton.jit
def _tma_tile(desc, start, n, h, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    """(BLOCK, HEAD_DIM) tile of head h at tokens [start, start + BLOCK), rows >= n zeroed."""
    x = desc.load([start.to(tl.int32), (h * HEAD_DIM).to(tl.int32)])
    return tl.where((tl.arange(0, BLOCK) < n)[:, None], x, tl.zeros_like(x))


# ----------------------------------------------------------------------------- forward


@triton.jit
def _fwd_kernel_tma(q_desc, k_desc, v_desc, O, SIN, tile_start, tile_len, n_tiles, n_programs,
                    tiles_per_program, stride_ot, stride_oh, stride_st, qk_scale,
                    H: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
                    ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
                    IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
                    CENTRED: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    pid = tl.program_id(0)
    # Branch-free body (tiles past the table have n = 0: every load is zeroed, every store
    # masked), so the pipeliner can issue tile i+1's TMA loads while tile i computes.
    for i in tl.range(0, tiles_per_program, warp_specialize=WARP_SPECIALIZE):
        h, start, n = _tile_at(pid + i * n_programs, tile_start, tile_len, n_tiles, H)
        q = _tma_tile(q_desc, start, n, h, HEAD_DIM, BLOCK)
        k = _tma_tile(k_desc, start, n, h, HEAD_DIM, BLOCK)
        v = _tma_tile(v_desc, start, n, h, HEAD_DIM, BLOCK)
        _fwd_body(q, k, v, h, start, n, O, SIN, stride_ot, stride_oh, stride_st, qk_scale,
                  HEAD_DIM, BLOCK, ROTARY, ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET)


# ----------------------------------------------------------------------------- backward


@triton.jit
def _bwd_kernel_tma(q_desc, k_desc, v_desc, do_desc, V, DQ, DK, DV, SIN,
                    tile_start, tile_len, n_tiles, n_programs, tiles_per_program,
                    stride_vt, stride_vh, stride_dqt, stride_dqh, stride_dkt, stride_dkh,
                    stride_dvt, stride_dvh, stride_st, qk_scale, sm_scale,
                    H: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
                    ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
                    IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
                    CENTRED: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    pid = tl.program_id(0)
    for i in tl.range(0, tiles_per_program, warp_specialize=WARP_SPECIALIZE):
        h, start, n = _tile_at(pid + i * n_programs, tile_start, tile_len, n_tiles, H)
        q = _tma_tile(q_desc, start, n, h, HEAD_DIM, BLOCK)
        k = _tma_tile(k_desc, start, n, h, HEAD_DIM, BLOCK)
        v = _tma_tile(v_desc, start, n, h, HEAD_DIM, BLOCK)
        do = _tma_tile(do_desc, start, n, h, HEAD_DIM, BLOCK)
        _bwd_body(q, k, v, do, h, start, n, V, DQ, DK, DV, SIN, stride_vt, stride_vh,
                  stride_dqt, stride_dqh, stride_dkt, stride_dkh, stride_dvt, stride_dvh,
                  stride_st, qk_scale, sm_scale,
                  HEAD_DIM, BLOCK, ROTARY, ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET, CENTRED)


# ----------------------------------------------------------------------------- eligibility


@dataclass(frozen=True)
class HopperConfig:
    num_warps: int
    num_stages: int  # 2 = one tile's TMA loads in flight ahead of the tile being computed
    programs_per_sm: int
    warp_specialize: bool = False
    maxnreg: int | None = None


DEFAULT_CONFIG = HopperConfig(num_warps=4, num_stages=2, programs_per_sm=2)
# Keys (kernel, rotary, head_dim): a config here makes `kernel_path` pick this path by default.
# None does: on an H100 (results/h100_2026-11-23c, tune_hopper.json) every config of
# benchmarks/tune_hopper.py was slower than the portable kernels at shape P. Best of each, bf16:
# D128 fwd 2.09 vs 1.91 ms (2 programs/SM, 2 stages), bwd 5.93 vs 4.25 ms; D64 fwd 1.22 vs
# 0.96, bwd 2.32 vs 1.89; rotary D128 fwd 5.05 vs 3.14, bwd 14.5 vs 7.57. Automatic warp
# specialisation (tl.range(warp_specialize=True)) was slower still where it compiled (plain fwd,
# D64 bwd) and fails in Triton 3.6's NVGPUWarpSpecialization pass for the plain D128 bwd and
# every rotary kernel (fwd and bwd).
# Few resident programs, each waiting on its own chain, overlap less than the portable path's
# many one-tile CTAs do. The path stays opt-in (BLOCKATTN_KERNEL_PATH=hopper) and tested.
CONFIGS: dict[tuple[str, bool, int], HopperConfig] = {}
# Where the default config does not fit one CTA's shared memory (227 KB on sm_90), and so would
# fail at launch: these do not make the path a default (only CONFIGS does). Rotary D128 bwd with
# rotate_v=False takes 245,828 B at 2 stages (compile-check, 2026-11-25).
FITS: dict[tuple[str, bool, int], HopperConfig] = {
    ("bwd", True, 128): HopperConfig(num_warps=4, num_stages=1, programs_per_sm=2),
}


# Row tiles (BLOCK = block_rows(block_size): 16, 32, 64 or 128) the path takes. Every config
# above was built, compile-checked and measured at 64-row tiles; 16 and 32 hold less of
# everything. A 128-row tile does not fit: its TMA ring (2 stages of q, k, v[, grad_out]
# 128-row tiles) and 128 x 128 score tiles need more than sm_90's 227 KB of shared memory per
# CTA (bf16 D128: 360,516 B required, OutOfResources on an H200, 2026-11-27, corpus v2's
# gpu-block-size-128-bf16-d128 under BLOCKATTN_KERNEL_PATH=prefer-hopper).
MAX_TILE_ROWS = 64


def unsupported_tile(block_rows_: int) -> str | None:
    """Why this path does not take tiles of `block_rows_` rows (None: it does)."""
    if block_rows_ > MAX_TILE_ROWS:
        return (f"{block_rows_}-row tiles (block_size > {MAX_TILE_ROWS}) need more than "
                f"sm_90's 227 KB of shared memory per CTA on the Hopper path (it takes row "
                f"tiles of 16..{MAX_TILE_ROWS})")  # fmt: skip
    return None


def hopper_config(kernel: str, rotary: bool, head_dim: int) -> HopperConfig:
    key = (kernel, rotary, head_dim)
    return CONFIGS.get(key) or FITS.get(key, DEFAULT_CONFIG)


def _tma_ok(t: Tensor) -> bool:
    """TMA needs a 16-byte aligned base and row stride, unit stride along D and heads packed
    (the (T, H*D) 2-D view the descriptor walks)."""
    T, H, D = t.shape
    if T == 0:
        return True  # nothing to read: the launchers return before building a descriptor
    size = t.element_size()
    return (t.stride(2) == 1 and (H == 1 or t.stride(1) == D) and t.data_ptr() % 16 == 0
            and (t.stride(0) * size) % 16 == 0 and (D * size) % 16 == 0)


def eligible(*tensors: Tensor) -> bool:
    """Whether the Hopper path can run these (T, H, D) tensors (dtype/arch checked by caller)."""
    return all(_tma_ok(t) for t in tensors)


def _desc(t: Tensor, block: int) -> TensorDescriptor:
    T, H, D = t.shape
    return TensorDescriptor(t, [T, H * D], [t.stride(0), 1], [block, D])


def _grid(n_tiles: int, device: torch.device, cfg: HopperConfig) -> int:
    # Off a GPU (the interpreter runs this source in the tests) a few programs still exercise
    # the persistent loop: each takes several tiles.
    sms = (torch.cuda.get_device_properties(device).multi_processor_count
           if device.type == "cuda" else 2)
    return min(n_tiles, sms * cfg.programs_per_sm)


# ----------------------------------------------------------------------------- launchers


def launch_fwd(q: Tensor, k: Tensor, v: Tensor, o: Tensor, table: TileTable,
                  sinu_pos: Tensor | None, scale: float, block_size: int,
                  rotate_v: bool) -> Tensor:
    _, H, D = q.shape
    cfg = hopper_config("fwd", sinu_pos is not None, D)
    n_tiles = table.n_slots * H
    grid = _grid(n_tiles, q.device, cfg)
    if grid == 0 or q.shape[0] == 0:  # T = 0: nothing to write (a TMA box needs rows)
        return o
    BLOCK = block_rows(block_size)
    sin = sinu_pos if sinu_pos is not None else q
    _fwd_kernel_tma[(grid,)](
        _desc(q, BLOCK), _desc(k, BLOCK), _desc(v, BLOCK), o, sin,
        table.start, table.length, n_tiles, grid, triton.cdiv(n_tiles, grid),
        o.stride(0), o.stride(1), sin.stride(0), scale * LOG2E,
        H=H, HEAD_DIM=D, BLOCK=BLOCK, WARP_SPECIALIZE=cfg.warp_specialize,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, maxnreg=cfg.maxnreg,
        **_flags(q, sinu_pos, rotate_v),  # via the module: the stage profile patches it
    )  # fmt: skip
    return o


def launch_bwd(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor,
                  grads: tuple[Tensor, Tensor, Tensor], table: TileTable,
                  sinu_pos: Tensor | None, scale: float, block_size: int, rotate_v: bool,
                  centred: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    _, H, D = q.shape
    dq, dk, dv = grads
    cfg = hopper_config("bwd", sinu_pos is not None, D)
    n_tiles = table.n_slots * H
    grid = _grid(n_tiles, q.device, cfg)
    if grid == 0 or q.shape[0] == 0:  # T = 0: nothing to write (a TMA box needs rows)
        return dq, dk, dv
    BLOCK = block_rows(block_size)
    sin = sinu_pos if sinu_pos is not None else q
    _bwd_kernel_tma[(grid,)](
        _desc(q, BLOCK), _desc(k, BLOCK), _desc(v, BLOCK), _desc(grad_out, BLOCK),
        v, dq, dk, dv, sin, table.start, table.length, n_tiles, grid, triton.cdiv(n_tiles, grid),
        v.stride(0), v.stride(1), dq.stride(0), dq.stride(1), dk.stride(0), dk.stride(1),
        dv.stride(0), dv.stride(1), sin.stride(0), scale * LOG2E, scale,
        H=H, HEAD_DIM=D, BLOCK=BLOCK, WARP_SPECIALIZE=cfg.warp_specialize,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, maxnreg=cfg.maxnreg,
        **_flags(q, sinu_pos, rotate_v, centred),
    )  # fmt: skip
    return dq, dk, dv
