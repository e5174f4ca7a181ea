"""Triton kernels for jagged block-diagonal attention, with optional fused rotary.

Reads top-down: the forward kernel, the backward kernel, launch configs, launchers. The tile
arithmetic they share with the Hopper path is `blockattn.kernels.tile_math`; which path runs is
`blockattn.kernels.dispatch`; autograd and custom-op registration live in `blockattn.ops`.

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

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

from blockattn.kernels.tile_math import (
    _SPLIT_DTYPES,
    INTERPRET,
    LOG2E,
    _bwd_body,
    _bwd_chunks,
    _flags,
    _fwd_out,
    _fwd_probs,
    _load,
    _qk_chunks,
    _softmax,
    _tile,
    _tile_at,
    block_rows,
)
from blockattn.kernels.tiles import TileTable

# ----------------------------------------------------------------------------- forward


@triton.jit
def _fwd_tile(h, start, n, Q, K, V, O, SIN,
              stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
              stride_ot, stride_oh, stride_st, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
              ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
              IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
              CHUNKS: tl.constexpr, K_SITE: tl.constexpr, V_SITE: tl.constexpr,
              V_LATE: tl.constexpr, PACKED: tl.constexpr):
    v_tile = _tile(V, start, n, h, stride_vt, stride_vh, BLOCK, HEAD_DIM)
    # Fused rotary, 16-bit inputs (the config's CHUNKS > 1): q and k are loaded, rotated and
    # split one column chunk at a time into S (_qk_chunks), so one chunk's fp32 rotation and
    # sin/cos are live instead of the whole tile's: sm_90 spilled 52/164 B (bf16/fp16, D = 128)
    # and 48/40 B (D = 64 at its 128-register cap) whole, 0 B chunked.
    CHUNKED: tl.constexpr = ROTARY and SPLIT and CHUNKS > 1
    # V is loaded once P is formed, so it is not live across QK^T and the softmax, where that
    # helps: plain D = 128 (at its 128-register cap 0 B spilled instead of 12) and the chunked
    # rotary forward (bf16 D = 128: 180 registers against 248 with V first). The whole-tile
    # rotary forward spilled more with V late (bf16 D = 128: 248 B against 52) and plain D = 64
    # began to spill on sm_100 (16 B): there V comes first, unless the placement says
    # otherwise (V_LATE, see PLACEMENTS).
    LOAD_V_LATE: tl.constexpr = CHUNKED or (not ROTARY and HEAD_DIM > 64) or V_LATE
    if CHUNKED:
        s, _, _ = _qk_chunks(h, start, n, Q, K, SIN, stride_qt, stride_qh, stride_kt, stride_kh,
                             stride_st, HEAD_DIM, BLOCK, CHUNKS, False, IS_BF16, IEEE, INTERPRET)
        p = _softmax(s, n, qk_scale, BLOCK)
    else:
        q = _load(_tile(Q, start, n, h, stride_qt, stride_qh, BLOCK, HEAD_DIM))
        k = _load(_tile(K, start, n, h, stride_kt, stride_kh, BLOCK, HEAD_DIM))
        if not LOAD_V_LATE:
            v = _load(v_tile)
        p = _fwd_probs(q, k, SIN, start, n, stride_st, qk_scale, HEAD_DIM, BLOCK, ROTARY, SPLIT,
                       IS_BF16, IEEE, INTERPRET, K_SITE, PACKED)
    if LOAD_V_LATE:
        v = _load(v_tile)
    _fwd_out(p, v, h, start, n, O, SIN, stride_ot, stride_oh, stride_st, HEAD_DIM, BLOCK,
             ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET, V_SITE, PACKED)


@triton.jit
def _fwd_kernel(Q, K, V, O, SIN, tile_start, tile_len, n_tiles, n_programs, tiles_per_program,
                stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                stride_ot, stride_oh, stride_st, qk_scale,
                H: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
                ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
                IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
                PERSISTENT: tl.constexpr, CENTRED: tl.constexpr, CHUNKS: tl.constexpr,
                K_SITE: tl.constexpr, V_SITE: tl.constexpr, V_LATE: tl.constexpr,
                PACKED: tl.constexpr):
    # CENTRED is read by the backward only, PACKED by the forward only; both kernels take the
    # same _flags and placement_flags.
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
                      HEAD_DIM, BLOCK, ROTARY, ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET, CHUNKS,
                      K_SITE, V_SITE, V_LATE, PACKED)
    else:  # one tile per program (always so under the interpreter): skip empty slots
        h, start, n = _tile_at(pid, tile_start, tile_len, n_tiles, H)
        if n > 0:
            _fwd_tile(h, start, n, Q, K, V, O, SIN,
                      stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                      stride_ot, stride_oh, stride_st, qk_scale,
                      HEAD_DIM, BLOCK, ROTARY, ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET, CHUNKS,
                      K_SITE, V_SITE, V_LATE, PACKED)


# ----------------------------------------------------------------------------- backward


@triton.jit
def _bwd_tile(h, start, n, Q, K, V, DO, DQ, DK, DV, SIN,
              stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
              stride_dot, stride_doh, stride_dqt, stride_dqh, stride_dkt, stride_dkh,
              stride_dvt, stride_dvh, stride_st, qk_scale, sm_scale,
              HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
              ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
              IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
              CENTRED: tl.constexpr, CHUNKS: tl.constexpr, K_SITE: tl.constexpr,
              V_SITE: tl.constexpr, V_LATE: tl.constexpr):
    if ROTARY and SPLIT and CENTRED and CHUNKS > 1:  # the config's column chunks (_bwd_chunks)
        _bwd_chunks(h, start, n, Q, K, V, DO, DQ, DK, DV, SIN,
                    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                    stride_dot, stride_doh, stride_dqt, stride_dqh, stride_dkt, stride_dkh,
                    stride_dvt, stride_dvh, stride_st, qk_scale, sm_scale,
                    HEAD_DIM, BLOCK, CHUNKS, ROTATE_V, IS_BF16, IEEE, INTERPRET)
    else:
        q = _load(_tile(Q, start, n, h, stride_qt, stride_qh, BLOCK, HEAD_DIM))
        k = _load(_tile(K, start, n, h, stride_kt, stride_kh, BLOCK, HEAD_DIM))
        v = _load(_tile(V, start, n, h, stride_vt, stride_vh, BLOCK, HEAD_DIM))
        do = _load(_tile(DO, start, n, h, stride_dot, stride_doh, BLOCK, HEAD_DIM))
        _bwd_body(q, k, v, do, h, start, n, V, DQ, DK, DV, SIN, stride_vt, stride_vh,
                  stride_dqt, stride_dqh, stride_dkt, stride_dkh, stride_dvt, stride_dvh,
                  stride_st, qk_scale, sm_scale,
                  HEAD_DIM, BLOCK, ROTARY, ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET, CENTRED,
                  K_SITE, V_SITE, V_LATE)


@triton.jit
def _bwd_kernel(Q, K, V, DO, DQ, DK, DV, SIN,
                tile_start, tile_len, n_tiles, n_programs, tiles_per_program,
                stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                stride_dot, stride_doh, stride_dqt, stride_dqh, stride_dkt, stride_dkh,
                stride_dvt, stride_dvh, stride_st, qk_scale, sm_scale,
                H: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
                ROTARY: tl.constexpr, ROTATE_V: tl.constexpr, SPLIT: tl.constexpr,
                IS_BF16: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
                PERSISTENT: tl.constexpr, CENTRED: tl.constexpr, CHUNKS: tl.constexpr,
                K_SITE: tl.constexpr, V_SITE: tl.constexpr, V_LATE: tl.constexpr,
                PACKED: tl.constexpr):
    pid = tl.program_id(0)
    if PERSISTENT:  # branch-free, as in _fwd_kernel
        for i in tl.range(0, tiles_per_program):
            h, start, n = _tile_at(pid + i * n_programs, tile_start, tile_len, n_tiles, H)
            _bwd_tile(h, start, n, Q, K, V, DO, DQ, DK, DV, SIN,
                      stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                      stride_dot, stride_doh, stride_dqt, stride_dqh, stride_dkt, stride_dkh,
                      stride_dvt, stride_dvh, stride_st, qk_scale, sm_scale,
                      HEAD_DIM, BLOCK, ROTARY, ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET,
                      CENTRED, CHUNKS, K_SITE, V_SITE, V_LATE)
    else:
        h, start, n = _tile_at(pid, tile_start, tile_len, n_tiles, H)
        if n > 0:
            _bwd_tile(h, start, n, Q, K, V, DO, DQ, DK, DV, SIN,
                      stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                      stride_dot, stride_doh, stride_dqt, stride_dqh, stride_dkt, stride_dkh,
                      stride_dvt, stride_dvh, stride_st, qk_scale, sm_scale,
                      HEAD_DIM, BLOCK, ROTARY, ROTATE_V, SPLIT, IS_BF16, IEEE, INTERPRET,
                      CENTRED, CHUNKS, K_SITE, V_SITE, V_LATE)

# ----------------------------------------------------------------------------- launchers


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
    # Fused rotary, 16-bit inputs: q and k (the backward: also V, dO and the gradients) formed in
    # this many column chunks of the head dim (_qk_chunks, _bwd_chunks); 1 = the whole tile.
    chunks: int = 1


# Chosen on an H200 by benchmarks/tune.py; keys: (kernel, rotary, head_dim).
# One program per tile beat every persistent grid size on an H200 at shape P (D=128):
# fwd 1.51 vs 1.55 ms (8/SM), bwd 3.52 vs 3.71 ms, rotary bwd 6.97 vs 9.40 ms; 8 warps were
# 1.5-2x slower (results/h200_2026-11-21/tune_d128.json). Since the persistent loop became
# branch-free, Triton software-pipelines it (num_stages >= 2), but two stages of q/k/v/dO take
# 144 KB of shared memory, 1 CTA per SM: bwd 3.97 vs 3.45 ms
# (results/h200_2026-11-22b/tune_persistent_d128.json).
# The register caps come from the maxnreg sweep (results/h200_2026-11-22/tune_maxnreg_3717ea2.json;
# its bwd rows measured a since-reverted bwd that re-loaded q and k, 3.89 vs 3.52 ms uncapped):
# 128 registers fit 4 CTAs per SM instead of 3 (fwd D=128: 1.442 vs 1.488 ms; rotary fwd D=64:
# 1.347 vs 1.909 ms), although ptxas then spills ~90-124 B per thread to L1: more loads in
# flight outweigh it. Their spill budget is what compile-check accepts; more fails. Elsewhere a
# cap only added spills and time (rotary fwd D=128 at 128: 11.7 ms): ptxas' own choice stays.
# The plain fwd D=128 fits the cap without spills since it loads V after P (_fwd_tile; same-run
# A/B against the load-V-first kernel: H200 1.389 vs 1.414 ms, H100 1.854 vs 1.880 ms,
# results/h200_2026-11-25e/late_v/, results/h100_2026-11-25e/after_late_v/): it accepts 0 B.
# The rotary D=128 bwd forms everything in two column chunks of the head dim (_bwd_chunks): fewer
# live registers (sm_90 spills 36/32 B bf16/fp16 against 448/484 B whole-tile) and faster in
# same-run A/Bs at shape P against the whole-tile body, gradients within 1 ulp + 2^-16 of the
# scale of it (0 elements apart): H100 bf16 7.094 vs 7.456 ms, fp16 6.842 vs 7.680
# (results/h100_2026-11-26/chunks_ab/); H200 bf16 6.964 vs 7.211, fp16 6.724 vs 7.334
# (results/h200_2026-11-26b/chunks_final/). Four chunks spill 0 B but are slower (H100 bf16
# 9.258 ms: more, smaller MMAs); at D=64 a chunk would be 32 columns, where a triton 3.6 forward
# with such dots miscompiled (results/h200_2026-11-26b/chunks/): D=64 stays whole. The D=128
# backward's remaining 36/32 B were tables, not the tile: Triton merged the V loop's sin/cos
# loads with the QK^T loop's (same addresses, no store between) and kept both chunks' tables
# live across the softmax. Read at a
# site of their own (_load_table) with q/k's chunk loads issued first (_qk_chunks PRELOAD), it
# spills 0 B; H100 same-run A/B against the spilling kernel (results/h100_2026-11-26b/final_ab/):
# bf16 7.061 vs 7.098 ms, fp16 6.921 vs 6.794 (1.2-1.9 % slower over three runs, the price of
# 0 B taken); H200 bf16 6.988 vs 6.962, fp16 6.870 vs 6.707 (results/h200_2026-11-26c/ab/).
# The rotary forward, chunked the same way (QK^T in two chunks, V loaded after P), spills 0 B
# but is faster only at fp16 D=128 (164 registers, 3 CTAs per SM: 2.972 vs 3.202 ms whole-tile,
# which spills 164 B): DTYPE_CONFIGS. bf16 D=128 (181 registers, 2 CTAs: 1.18-1.39x the whole
# tile's time) and D=64 at its 128 cap (0 B: 1.19-1.30x) stay whole (results/h100_2026-11-26b/
# variants/). The whole-tile D=64 kernels' spills are then down to where their tables are read
# (PLACEMENTS): the bf16 forward and the fp16 backward spill 0 B; the fp16 forward keeps 40 B
# (sm_90, rotate_v), the bf16 backward 16 B (sm_90; 0 B sm_100), the bf16 D=128 forward 40 B
# (sm_90; 0 B sm_100): 96 B and 52 B before tile_math._split packed bf16 (aff7cfe).
_STAGES = {"fwd": 1, "bwd": 2}  # no loop to pipeline at one tile per program: no effect
CONFIGS: dict[tuple[str, bool, int], LaunchConfig] = {
    ("fwd", False, 128): LaunchConfig(4, 1, 0, maxnreg=128),
    ("fwd", True, 64): LaunchConfig(4, 1, 0, maxnreg=128),
    ("fwd", True, 128): LaunchConfig(4, 1, 0, accepted_spill_bytes=40),
    ("bwd", True, 64): LaunchConfig(4, 2, 0, maxnreg=168, accepted_spill_bytes=16),
    ("bwd", True, 128): LaunchConfig(4, 2, 0, chunks=2),
}


# Tiles of more than 64 rows (block_size 128): 8 warps, no register cap (launch_config). What
# their D = 128 builds still spill, the most over bf16 / fp16, rotate_v or not, sm_90 / sm_100
# (compile-check, 2026-11-28): not measured on a GPU against other configs.
LARGE_BLOCK_SPILLS: dict[tuple[str, bool, int], int] = {
    ("fwd", True, 128): 144,
    ("bwd", False, 128): 196,
    ("bwd", True, 128): 1044,
}


# Where one 16-bit dtype measured another config faster, over CONFIGS.
DTYPE_CONFIGS: dict[tuple[str, bool, int, torch.dtype], LaunchConfig] = {
    ("fwd", True, 128, torch.float16): LaunchConfig(4, 1, 0, chunks=2),
    # the rotary D = 64 kernels' spills differ by dtype (PLACEMENTS): fp16's forward and
    # backward spill none (the forward since its placements of 2026-11-27; 40 / 4 B before),
    # bf16's in CONFIGS (fwd 0 B, bwd 16 B on sm_90)
    ("fwd", True, 64, torch.float16): LaunchConfig(4, 1, 0, maxnreg=128),
    ("bwd", True, 64, torch.float16): LaunchConfig(4, 2, 0, maxnreg=168),
}


# The fast precision mode (`precision="fast"`, tile_math._flags): no hi/lo halves, so the
# accurate mode's register caps and column chunks (sized for the split operands) do not apply;
# keys (kernel, rotary, head_dim), absent = one program per tile, 4 warps, no cap. On sm_90 the
# fast rotary kernels and the plain fast backward are Gluon (attention_gluon_rotary_fast); these
# run elsewhere and for inputs TMA cannot walk. The D64 rotary caps were measured faster on an
# H200 at shape P (results/h200_2026-11-27f/ab_portable_fast/: fwd 1.020 vs 1.102 ms uncapped,
# 0 B spilled; bwd 1.975 vs 2.316 ms, 12 B spilled); the D128 rotary kernels spill uncapped
# (docs/known-limits.md) and spilled more, and ran 2-3x slower, at caps of 128 / 168.
FAST_CONFIGS: dict[tuple[str, bool, int], LaunchConfig] = {
    ("fwd", False, 128): LaunchConfig(4, 1, 0, maxnreg=128),
    ("fwd", True, 64): LaunchConfig(4, 1, 0, maxnreg=128),
    ("bwd", True, 64): LaunchConfig(4, 2, 0, maxnreg=168, accepted_spill_bytes=12),
}


def launch_config(kernel: str, rotary: bool, head_dim: int,
                  dtype: torch.dtype = torch.bfloat16, fast: bool = False,
                  block: int = 64) -> LaunchConfig:
    """The launch options of a kernel; `block` is the tile's rows (block_rows(block_size))."""
    default = LaunchConfig(num_warps=4, num_stages=_STAGES[kernel], programs_per_sm=0)
    if block > 64 and dtype in _SPLIT_DTYPES:
        # Every config above was tuned for 64-row tiles; a 128-row tile holds twice the scores
        # per thread. Under them 22 of the 24 sm_90 builds spilled 1.3-13 KB a thread (the
        # rotary D = 64 forward 5,056 B at its 128-register cap); 8 warps (a warpgroup per 64
        # rows), no cap, the whole tile: 0 B at D = 64 and the plain D = 128 forward, the rest
        # within LARGE_BLOCK_SPILLS (compile-check's "-bs128" variants, results/cpu_2026-11-28h).
        # Whole tile: at 128 rows the chunked fp16 rotate_v backward wrote NaN over all of dQ
        # and dK on an H200 (triton 3.6; the interpreter was right; results/h200_2026-11-26f).
        return LaunchConfig(num_warps=8, num_stages=_STAGES[kernel], programs_per_sm=0,
                            accepted_spill_bytes=LARGE_BLOCK_SPILLS.get(
                                (kernel, rotary, head_dim), 0))
    if fast:
        return FAST_CONFIGS.get((kernel, rotary, head_dim), default)
    if dtype not in _SPLIT_DTYPES:
        # The tuned configs are for 16-bit inputs. fp32 inputs (the exact-input reference path:
        # ieee dots lowered to FMA loops, not a speed path) spill kilobytes under any cap.
        return default
    return DTYPE_CONFIGS.get((kernel, rotary, head_dim, dtype)) or CONFIGS.get(
        (kernel, rotary, head_dim), default)


@dataclass(frozen=True)
class Placement:
    """Where a fused-rotary whole-tile kernel reads its sin/cos tables and forms V: choices that
    change no arithmetic, only which values ptxas must keep live (see _load_table)."""
    k_site: int = 0  # k's table: 0 = q's load (merged), 1 = a load of its own
    v_site: int = 0  # the rotated V's table: 0 = merged with q's and k's, 1 = its own
    v_late: bool = False  # V loaded (forward) or centred (plain V, backward) after QK^T
    packed: bool = True  # forward, bf16: hi/lo splits two elements per PTX conversion (_split)


# Per (kernel, head dim, dtype, rotate_v), fused rotary only; absent = Placement(). Searched on
# CPU over every combination of the three fields with `compile-check` (sm_90 and sm_100, ptxas
# of triton 3.6), then timed against the default placement at shape P on an H100
# (results/h100_2026-11-26c/: placement_ab/ chose, 3 rounds; landed_ab/ confirmed, 5 rounds,
# where unchanged kernels read 0.996-1.011; every output 0 elements apart), then on an H200
# (results/h200_2026-11-26d/, 5 rounds; unchanged 1.005-1.016). Register allocation
# decides these, not arithmetic: a kernel change can move them, and compile-check's budgets say
# so. Spills (sm_90 / sm_100, B) default -> placed; time placed / default (H100 chose, H100
# confirmed, H200):
#   fwd D64 bf16, rotate_v:  48 / 8   -> 0 / 0, V late:                     1.020 / 1.034 / 1.008
#   bwd D64 fp16, rotate_v:   8 / 100 -> 0 / 0, k's and V's tables apart:   1.014 / 1.024 / 1.024
#   bwd D64 fp16, q/k only:  40 / 0   -> 0 / 0, k's table apart:            1.009 / 1.010 / 1.005
#   bwd D64 bf16, q/k only:  68 / 0   -> 24 / 0, plain V centred late:      0.991 / 0.996 / 0.991
# The rule, set before the confirming run: take a placement that is spill-free on both targets
# where it costs at most 2.5 % (the price taken for the 0 B fp16 D = 128 backward, see CONFIGS:
# the issue asks for no spills), and one that only spills less where it is not slower. Dropped
# after the H200 run: fwd D64 fp16 q/k only (0 / 24 -> 0 / 0 B, k's table apart: 1.022 / 1.027 /
# 1.042; it removed a Blackwell-only spill at a price on Hopper). Not taken: fwd D64 fp16
# rotate_v (0 / 0 B with V late and its table apart: 1.057); bwd D64 bf16 rotate_v (16 / 16 B,
# tables apart: 1.013; no combination reached 0 B in the bf16 backward); fwd D128 bf16 rotate_v
# (40 / 12 B against 52 / 32, V late and its table apart: 1.240; at 8 warps it spills 0 B but
# takes 1.96x the time, results/h100_2026-11-26c/eight_warps_ab/).
# packed (bf16 splits two elements per PTX conversion, tile_math._split; same bits): on by
# default; it took registers off every bf16 build but made two forwards spill at sm_90, which
# keep the compiler's form: D64 rotate_v 0 -> 8 B (0.951x the time packed, H200, but the rule
# above keeps 0 B where it was) and D128 q/k only 0 -> 12 B (1.076x). H200 same-run A/B at
# aff7cfe (results/h200_2026-11-27/ab_packed_tile_math_aff7cfe/): rotary fwd D128 rotate_v
# 0.917, q/k 1.000, D64 1.000, 0.974; 0 elements apart.
# Since 9fbf09b the Gluon rotary forward is the default on sm_90 (attention_gluon_rotary_fwd),
# so there the portable rotary forwards run only for inputs TMA cannot walk, and on sm_100 they
# are the default: the fp16 D = 64 forwards take their spill-free placements after all (rotate_v
# 0 / 4 B -> 0 / 0 with V late and its table apart; q/k only 0 / 24 B -> 0 / 0 with k's table
# apart). Their Hopper prices above (1.057; 1.022-1.042) now fall on that fallback only; no
# Blackwell was lent to time them there.
PLACEMENTS: dict[tuple[str, int, torch.dtype, bool], Placement] = {
    ("fwd", 64, torch.bfloat16, True): Placement(v_late=True, packed=False),
    ("fwd", 64, torch.float16, True): Placement(v_site=1, v_late=True),
    ("fwd", 64, torch.float16, False): Placement(k_site=1),
    ("fwd", 128, torch.bfloat16, False): Placement(packed=False),
    ("bwd", 64, torch.float16, True): Placement(k_site=1, v_site=1),
    ("bwd", 64, torch.float16, False): Placement(k_site=1),
    ("bwd", 64, torch.bfloat16, False): Placement(v_late=True),
}


def placement_flags(kernel: str, head_dim: int, dtype: torch.dtype, rotary: bool,
                    rotate_v: bool) -> dict:
    """The kernels' K_SITE, V_SITE, V_LATE, PACKED constexprs (PLACEMENTS; the default without
    rotary)."""
    p = PLACEMENTS.get((kernel, head_dim, dtype, rotate_v), Placement()) if rotary else Placement()
    return dict(K_SITE=p.k_site, V_SITE=p.v_site, V_LATE=p.v_late, PACKED=p.packed)


def _grid_size(n_tiles: int, device: torch.device, cfg: LaunchConfig) -> int:
    if n_tiles == 0:
        return 0
    if INTERPRET or cfg.programs_per_sm == 0:
        return n_tiles  # one tile per program (always so under the interpreter, see _fwd_kernel)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return min(n_tiles, sms * cfg.programs_per_sm)


def launch_fwd(q: Tensor, k: Tensor, v: Tensor, table: TileTable, sinu_pos: Tensor | None,
               scale: float, block_size: int, rotate_v: bool, o: Tensor,
               chunks: int | None = None, fast: bool = False) -> Tensor:
    """The portable forward kernel; `chunks` overrides the config's (A/B runs, tests); `fast`
    runs the fast precision mode (tile_math._flags)."""
    _, H, D = q.shape
    cfg = launch_config("fwd", sinu_pos is not None, D, q.dtype, fast, block_rows(block_size))
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
        PERSISTENT=grid < n_tiles, CHUNKS=cfg.chunks if chunks is None else chunks,
        **_flags(q, sinu_pos, rotate_v, fast=fast),
        **placement_flags("fwd", D, q.dtype, sinu_pos is not None, rotate_v),
    )  # fmt: skip
    return o


def launch_bwd(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor, table: TileTable,
               sinu_pos: Tensor | None, scale: float, block_size: int, rotate_v: bool,
               grads: tuple[Tensor, Tensor, Tensor], centred: bool = True,
               chunks: int | None = None, fast: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """The portable backward kernel; `chunks` overrides the config's (A/B runs, tests); `fast`
    runs the fast precision mode (tile_math._flags: not centred, whatever `centred` says)."""
    _, H, D = q.shape
    dq, dk, dv = grads
    cfg = launch_config("bwd", sinu_pos is not None, D, q.dtype, fast, block_rows(block_size))
    if chunks is None:
        chunks = cfg.chunks
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
        PERSISTENT=grid < n_tiles, CHUNKS=chunks,
        **_flags(q, sinu_pos, rotate_v, centred, fast),
        **placement_flags("bwd", D, q.dtype, sinu_pos is not None, rotate_v),
    )  # fmt: skip
    return dq, dk, dv
