"""Planted kernel bugs: "core" (masking, scaling, softmax/Di, gradient plumbing, strides, tile
table, autograd, the Hopper path) and "rotary" (anchors inside `_rotate`, `_load_sinu`, `_store`
and the rotation call sites, the functions most often edited for register pressure, kept apart
and re-checked on every test run)."""

from __future__ import annotations

from blockattn.mutants.mutant import (
    ATT,
    CHUNK_TESTS,
    GLUON,
    GLUON_CHAINS_1,
    GLUON_CHAINS_2,
    GLUON_LEAN,
    GLUON_ROTARY,
    GLUON_ROTARY_FWD,
    GLUON_ROTARY_TESTS,
    HOPPER,
    OPS,
    PORTABLE,
    PREFER_GLUON,
    PREFER_HOPPER,
    TILE_MATH,
    TILES,
    Mutant,
)

CORE: tuple[Mutant, ...] = (
    Mutant(
        "mask-off-by-one",
        "core",
        TILE_MATH,
        "s = tl.where((tl.arange(0, BLOCK) < n)[None, :],",
        "s = tl.where((tl.arange(0, BLOCK) <= n)[None, :],",
        "key mask `<= n`: one padded (zero) key of a partial block gets probability",
        ci=True,
    ),
    Mutant(
        "key-mask-missing",
        "core",
        TILE_MATH,
        's = tl.where((tl.arange(0, BLOCK) < n)[None, :], s * qk_scale, float("-inf"))',
        "s = s * qk_scale",
        "no key mask: padded keys of the partial block take part in the softmax",
    ),
    Mutant(
        "softmax-no-max-subtraction",
        "core",
        TILE_MATH,
        "p = tl.math.exp2(s - m[:, None])",
        "p = tl.math.exp2(s)",
        "softmax without subtracting the row max: overflows on large logits",
    ),
    Mutant(
        "fwd-scale-twice",
        "core",
        ATT,
        "o.stride(0), o.stride(1), sin.stride(0), scale * LOG2E,",
        "o.stride(0), o.stride(1), sin.stride(0), scale * scale * LOG2E,",
        "forward multiplies the logits by the softmax scale twice",
    ),
    Mutant(
        "fwd-scale-missing",
        "core",
        ATT,
        "o.stride(0), o.stride(1), sin.stride(0), scale * LOG2E,",
        "o.stride(0), o.stride(1), sin.stride(0), LOG2E,",
        "forward never applies the softmax scale",
    ),
    Mutant(
        "bwd-log2e-missing",
        "core",
        ATT,
        "        scale * LOG2E, scale,\n",
        "        scale, scale,\n",
        "backward recomputes P with exp2 of natural-log-domain logits (fwd/bwd disagree)",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "dqdk-scale-twice",
        "core",
        ATT,
        "        scale * LOG2E, scale,\n",
        "        scale * LOG2E, scale * scale,\n",
        "backward multiplies dQ and dK by the softmax scale twice",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "dq-scale-missing",
        "core",
        TILE_MATH,
        "_store(_tile(DQ, start, n, h, stride_dqt, stride_dqh, BLOCK, HEAD_DIM), acc * sm_scale,",
        "_store(_tile(DQ, start, n, h, stride_dqt, stride_dqh, BLOCK, HEAD_DIM), acc,",
        "dQ is stored without the softmax scale",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "di-dropped",
        "core",
        TILE_MATH,
        # Both passes of Di: dropping only the second would leave dP shifted by the first.
        "if CENTRED:  # first pass of Di\n"
        "        dp = dp - tl.sum(p * dp, axis=1)[:, None]\n"
        "    return p * (dp - tl.sum(p * dp, axis=1)[:, None])",
        "return p * dp",
        "dS = P * dP: the Di = rowsum(P * dP) term of the softmax backward is dropped",
        ci=True,
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "di-from-rounded-p",
        "core",
        TILE_MATH,
        # Both passes of Di, replaced by one pass from the rounded P.
        "if CENTRED:  # first pass of Di\n"
        "        dp = dp - tl.sum(p * dp, axis=1)[:, None]\n"
        "    return p * (dp - tl.sum(p * dp, axis=1)[:, None])",
        "return p * (dp - tl.sum(p.to(tl.bfloat16).to(tl.float32) * dp, axis=1)[:, None])",
        "Di computed from P rounded to bf16 instead of the fp32 P",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "ds-missing-p",
        "core",
        TILE_MATH,
        "return p * (dp - tl.sum(p * dp, axis=1)[:, None])",
        "return dp - tl.sum(p * dp, axis=1)[:, None]",
        "dS = dP - Di: the factor P of the softmax Jacobian is forgotten",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "p-rounded-before-normalisation",
        "core",
        TILE_MATH,
        "return p / tl.sum(p, axis=1)[:, None]",
        "return p.to(tl.bfloat16).to(tl.float32) / tl.sum(p, axis=1)[:, None]",
        "unnormalised P rounded to bf16, then divided by the fp32 row sum",
    ),
    Mutant(
        "dv-written-to-dk",
        "core",
        TILE_MATH,
        "_store(_tile(DV, start, n, h, stride_dvt, stride_dvh, BLOCK, HEAD_DIM), acc,",
        "_store(_tile(DK, start, n, h, stride_dkt, stride_dkh, BLOCK, HEAD_DIM), acc,",
        "dV is stored into dK's buffer (dV left unwritten, dK overwritten later)",
        ci=True,
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "dk-uses-ds-untransposed",
        "core",
        TILE_MATH,
        "acc = _mma_split(tl.trans(ds_hi), tl.trans(ds_lo), q_hi, q_lo,",
        "acc = _mma_split(ds_hi, ds_lo, q_hi, q_lo,",
        "dK = dS Q instead of dS^T Q",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "dv-uses-p-untransposed",
        "core",
        TILE_MATH,
        "acc = _mma_split(tl.trans(p_hi), tl.trans(p_lo), do, do,",
        "acc = _mma_split(p_hi, p_lo, do, do,",
        "dV = P dO instead of P^T dO",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "head-index-from-block",
        "core",
        TILE_MATH,
        "    return tile % H, start, n\n",
        "    return blk % H, start, n\n",
        "head index taken from the block index (some heads computed twice, some never)",
    ),
    Mutant(
        "strides-assumed-contiguous",
        "core",
        ATT,
        "q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),\n"
        "        o.stride(0)",
        "H * D, D, H * D, D, H * D, D,\n        o.stride(0)",
        "forward assumes contiguous (T, H, D) inputs: wrong token/head strides for strided views",
    ),
    Mutant(
        "single-token-block-skipped",
        "core",
        ATT,
        "        if n > 0:\n            _fwd_tile(",
        "        if n > 1:\n            _fwd_tile(",
        "forward empty-tile guard `n > 1`: blocks of one token are never written",
    ),
    Mutant(
        "block-start-from-batch",
        "core",
        TILES,
        "start = off[seq_c] + j * block_size",
        "start = slot * block_size",
        "block start from the flat token stream (slot * 64), not from its sequence's start",
        ci=True,
        tests=("tests/kernels/test_tile_table.py",),
    ),
    Mutant(
        "partial-block-dropped",
        "core",
        TILES,
        "nblk = (lengths + block_size - 1) // block_size",
        "nblk = lengths // block_size",
        "blocks per sequence floor(n / 64) instead of ceil: the partial last block is dropped",
        tests=("tests/kernels/test_tile_table.py",),
    ),
    Mutant(
        "partial-block-as-full",
        "core",
        TILES,
        "length = (lengths[seq_c] - j * block_size).clamp(0, block_size)",
        "length = torch.full_like(lengths[seq_c], block_size)",
        "every block treated as full: the partial block reads into the next sequence",
        tests=("tests/kernels/test_tile_table.py",),
    ),
    Mutant(
        "slot-to-sequence-off-by-one",
        "core",
        TILES,
        "seq = torch.searchsorted(cum, slot, right=True)",
        "seq = torch.searchsorted(cum, slot, right=False)",
        "searchsorted side wrong: the last block of each sequence maps to the next sequence",
        tests=("tests/kernels/test_tile_table.py",),
    ),
    # The same four bugs in the Triton-built table, the one the GPU path uses (the torch one
    # above serves CPU and is the reference): killed by the builders' comparison on CPU (the
    # interpreter) and by the cases on a GPU.
    Mutant(
        "tiles-triton-block-start-from-batch",
        "core",
        TILES,
        "    start = first + j * BS\n",
        "    start = j * BS + first * 0\n",
        "Triton tile table: block start from the token stream's start, not its sequence's",
        tests=("tests/kernels/test_tile_table.py",),
    ),
    Mutant(
        "tiles-triton-partial-block-dropped",
        "core",
        TILES,
        "n = tl.where(m, (hi - lo + BS - 1) // BS, 0)",
        "n = tl.where(m, (hi - lo) // BS, 0)",
        "Triton tile table: floor(n / bs) blocks per sequence, the partial last block dropped",
        tests=("tests/kernels/test_tile_table.py",),
    ),
    Mutant(
        "tiles-triton-partial-block-as-full",
        "core",
        TILES,
        "length = tl.minimum(tl.maximum(n - j * BS, 0), BS)",
        "length = tl.where(n - j * BS > 0, BS, 0)",
        "Triton tile table: every block full, the partial block reads into the next sequence",
        tests=("tests/kernels/test_tile_table.py",),
    ),
    Mutant(
        "tiles-triton-slot-to-sequence-off-by-one",
        "core",
        TILES,
        "right = (mid < B) & (c <= s)",
        "right = (mid < B) & (c < s)",
        "Triton tile table: the binary search's side wrong, a sequence's last block maps to the "
        "next sequence",
        tests=("tests/kernels/test_tile_table.py",),
    ),
    Mutant(
        "autograd-dk-dv-swapped",
        "core",
        OPS,
        "return dq, dk, dv, None, None, None, None, None, None",
        "return dq, dv, dk, None, None, None, None, None, None",
        "autograd backward returns dV as k's gradient and dK as v's",
        ci=True,
    ),
    Mutant(
        "projection-packed-dk-dv-swapped",
        "core",
        OPS,
        "    grads = _split_packed(d_proj, qheads, kvheads)",
        "    gq, gk, gv = _split_packed(d_proj, qheads, kvheads)\n    grads = (gq, gv, gk)",
        "the projection backward writes dK into the packed gradient's v slice and dV into k's",
    ),
    # The Hopper TMA path (opt-in): its workers run with BLOCKATTN_KERNEL_PATH=prefer-hopper.
    Mutant(
        "hopper-rows-past-block-not-zeroed",
        "core",
        HOPPER,
        "return tl.where((tl.arange(0, BLOCK) < n)[:, None], x, tl.zeros_like(x))",
        "return x",
        "Hopper path: the rows a partial block's TMA box reads past its end (the next "
        "sequence's) are not zeroed: its dO and q rows leak into dV and dK",
        ci=True,
        env=PREFER_HOPPER,
    ),
    Mutant(
        "hopper-box-at-head-0",
        "core",
        HOPPER,
        "x = desc.load([start.to(tl.int32), (h * HEAD_DIM).to(tl.int32)])",
        "x = desc.load([start.to(tl.int32), 0])",
        "Hopper path: every head's TMA box starts at head 0's columns",
        env=PREFER_HOPPER,
    ),
    Mutant(
        "hopper-fwd-scale-missing",
        "core",
        HOPPER,
        "o.stride(0), o.stride(1), sin.stride(0), scale * LOG2E,",
        "o.stride(0), o.stride(1), sin.stride(0), LOG2E,",
        "Hopper path: the forward launcher drops the softmax scale (the portable launcher's "
        "scale mutants never run there)",
        env=PREFER_HOPPER,
    ),
    Mutant(
        "hopper-bwd-log2e-missing",
        "core",
        HOPPER,
        "dv.stride(0), dv.stride(1), sin.stride(0), scale * LOG2E, scale,",
        "dv.stride(0), dv.stride(1), sin.stride(0), scale, scale,",
        "Hopper path: the backward recomputes P with exp2 of natural-log-domain logits",
        env=PREFER_HOPPER,
    ),
    # The Gluon backward: its workers run with BLOCKATTN_KERNEL_PATH=prefer-gluon, on sm_90 only.
    Mutant(
        "gluon-rows-past-block-not-zeroed",
        "core",
        GLUON,
        "            if n < BM:\n                _zero_rows(qb, n, r_lay)\n"
        "                _zero_rows(kb, n, r_lay)\n                _zero_rows(vb, n, r_lay)",
        "            if n < 0:\n                _zero_rows(qb, n, r_lay)\n"
        "                _zero_rows(kb, n, r_lay)\n                _zero_rows(vb, n, r_lay)",
        "Gluon path: the rows a partial block's TMA box reads past its end (the next "
        "sequence's) are not zeroed in shared memory",
        env=PREFER_GLUON + GLUON_CHAINS_1,
        needs_sm90=True,
    ),
    Mutant(
        "gluon-q-box-at-head-0",
        "core",
        GLUON,
        "tma.async_copy_global_to_shared(q_desc, [row, col], bar, q_s.index(stage), pred)",
        "tma.async_copy_global_to_shared(q_desc, [row, 0], bar, q_s.index(stage), pred)",
        "Gluon path: every head's q tile is loaded from head 0's columns",
        env=PREFER_GLUON + GLUON_CHAINS_1,
        needs_sm90=True,
    ),
    Mutant(
        "gluon-table-read-a-tile-late",
        "core",
        GLUON,
        "nn_start, nn_n, nn_h = _tile_at(gl.minimum(t + 2 * n_prog, n_tiles - 1), tile_start,",
        "nn_start, nn_n, nn_h = _tile_at(gl.minimum(t + n_prog, n_tiles - 1), tile_start,",
        "Gluon path: the tile table is read one tile late in the persistent loop (a program "
        "with three or more tiles computes its second twice and never its last); the quick "
        "tier has fewer tiles than programs, so the path's own many-tile test kills it",
        env=PREFER_GLUON + GLUON_CHAINS_1,
        needs_sm90=True,
        tests=("tests/kernels/test_gluon_path.py::test_gluon_persistent_loop_many_tiles",),
    ),
    # The two-chain kernel (_consumer): BLOCKATTN_GLUON_CHAINS=2 selects it on any sm_90 GPU.
    Mutant(
        "gluon2-v-do-rows-past-block-not-zeroed",
        "core",
        GLUON,
        "            if n < BM:\n                _zero_rows(vb, n, r_lay)\n"
        "                _zero_rows(dob, n, r_lay)",
        "            if n < 0:\n                _zero_rows(vb, n, r_lay)\n"
        "                _zero_rows(dob, n, r_lay)",
        "Gluon two-chain kernel: the V and dO rows a partial block's box reads past its end "
        "(the next sequence's) are not zeroed: those dO rows reach dV through P's padded rows",
        env=PREFER_GLUON + GLUON_CHAINS_2,
        needs_sm90=True,
    ),
    Mutant(
        "gluon2-second-chain-repeats-first",
        "core",
        GLUON,
        "    vp = CHAINS * gl.program_id(0) + C\n",
        "    vp = CHAINS * gl.program_id(0)\n",
        "Gluon two-chain kernel: the worker warpgroup walks the default one's tiles, so every "
        "other tile's gradients are never written",
        env=PREFER_GLUON + GLUON_CHAINS_2,
        needs_sm90=True,
        tests=("tests/kernels/test_gluon_path.py::test_gluon_persistent_loop_many_tiles",),
    ),
    Mutant(
        "gluon2-table-read-a-tile-late",
        "core",
        GLUON,
        "nn_start, nn_n, nn_h = _tile_at(gl.minimum(t + 2 * n_vp, n_tiles - 1), tile_start,",
        "nn_start, nn_n, nn_h = _tile_at(gl.minimum(t + n_vp, n_tiles - 1), tile_start,",
        "Gluon two-chain kernel: each chain reads the tile table one tile late (its second "
        "tile computed twice, its last never); killed by the path's many-tile test",
        env=PREFER_GLUON + GLUON_CHAINS_2,
        needs_sm90=True,
        tests=("tests/kernels/test_gluon_path.py::test_gluon_persistent_loop_many_tiles",),
    ),
    Mutant(
        "gluon-lean-walks-two-chains",
        "core",
        GLUON,
        "do_s, x_s, y_s, pd_s, bars, H, IS_BF16, num_warps, CHAINS)",
        "do_s, x_s, y_s, pd_s, bars, H, IS_BF16, num_warps, 2)",
        "Gluon one-stage kernel: a lone chain strides as if a second one shared the CTA, so half "
        "the tiles' gradients are never written (a no-op for the two-chain configuration)",
        env=PREFER_GLUON + GLUON_LEAN,
        needs_sm90=True,
        tests=("tests/kernels/test_gluon_path.py::test_gluon_persistent_loop_many_tiles",),
    ),
    # The Gluon fused-rotary backward (attention_gluon_rotary), sm_90 only.
    Mutant(
        "gluon-rot-gradients-rotated-forward",
        "core",
        GLUON_ROTARY,
        "        x = _rotate(x, sin, cos, True)\n",
        "        x = _rotate(x, sin, cos, False)\n",
        "Gluon rotary backward: the gradients are rotated by the forward rotation instead of its "
        "transpose before they are stored",
        env=PREFER_GLUON,
        needs_sm90=True,
        tests=GLUON_ROTARY_TESTS,
    ),
    Mutant(
        "gluon-rot-cos-read-from-sin-columns",
        "core",
        GLUON_ROTARY,
        "    cos = gl.load(ptrs + HALF, mask=mask, other=0.0).to(gl.float32)",
        "    cos = gl.load(ptrs, mask=mask, other=0.0).to(gl.float32)",
        "Gluon rotary backward: cos is read from the table's sin columns",
        env=PREFER_GLUON,
        needs_sm90=True,
        tests=GLUON_ROTARY_TESTS,
    ),
    Mutant(
        "gluon-rot-v-do-rows-past-block-not-zeroed",
        "core",
        GLUON_ROTARY,
        "            if n < BM:\n                _zero_rows(cb, n, r_lay)\n"
        "                _zero_rows(db, n, r_lay)",
        "            if n < 0:\n                _zero_rows(cb, n, r_lay)\n"
        "                _zero_rows(db, n, r_lay)",
        "Gluon rotary backward: the V and dO rows a partial block's box reads past its end (the "
        "next sequence's) are not zeroed",
        env=PREFER_GLUON,
        needs_sm90=True,
        tests=GLUON_ROTARY_TESTS,
    ),
    Mutant(
        "gluon-rot-programs-repeat-tiles",
        "core",
        GLUON_ROTARY,
        "    vp = gl.program_id(0)\n",
        "    vp = gl.program_id(0) // 2 * 2\n",
        "Gluon rotary backward: each odd program walks its even neighbour's tiles, so those "
        "tiles are computed twice and the odd programs' tiles never",
        env=PREFER_GLUON,
        needs_sm90=True,
        tests=GLUON_ROTARY_TESTS,
    ),
    # The Gluon fused-rotary forward (attention_gluon_rotary_fwd), sm_90 only.
    Mutant(
        "gluon-rot-fwd-v-rows-past-block-not-zeroed",
        "core",
        GLUON_ROTARY_FWD,
        "            if n < BM:\n                _zero_rows(c_s, n, r_lay)",
        "            if n < 0:\n                _zero_rows(c_s, n, r_lay)",
        "Gluon rotary forward: the V rows a partial block's box reads past its end (the next "
        "sequence's) are not zeroed, so a non-finite value there reaches O (0 x NaN)",
        env=PREFER_GLUON,
        needs_sm90=True,
        tests=GLUON_ROTARY_TESTS,
    ),
    Mutant(
        "gluon-rot-fwd-programs-repeat-tiles",
        "core",
        GLUON_ROTARY_FWD,
        "    vp = gl.program_id(0)\n",
        "    vp = gl.program_id(0) // 2 * 2\n",
        "Gluon rotary forward: each odd program walks its even neighbour's tiles, so those "
        "tiles are computed twice and the odd programs' tiles never",
        env=PREFER_GLUON,
        needs_sm90=True,
        tests=GLUON_ROTARY_TESTS,
    ),
    Mutant(
        "gluon-rot-fwd-v-rotated-backward",
        "core",
        GLUON_ROTARY_FWD,
        "                _rotate_split(c_s, g_s, sin, cos, r_lay, n, False)",
        "                _rotate_split(c_s, g_s, sin, -cos, r_lay, n, False)",
        "Gluon rotary forward: V rotated by the wrong angle (cos negated)",
        env=PREFER_GLUON,
        needs_sm90=True,
        tests=GLUON_ROTARY_TESTS,
    ),
)

# Anchors in the rotary code (see module docstring): written last, re-checked on every run.
ROTARY: tuple[Mutant, ...] = (
    Mutant(
        "rotary-sign-flipped",
        "rotary",
        TILE_MATH,
        "y0 = x0 * cos - x1 * sin\n        y1 = x1 * cos + x0 * sin",
        "y0 = x0 * cos + x1 * sin\n        y1 = x1 * cos - x0 * sin",
        "forward rotary rotates by -angle (sin sign flipped)",
        ci=True,
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "rotary-sin-cos-swapped",
        "rotary",
        TILE_MATH,
        "sin = _load_table(ptrs, mask, SITE)\n        cos = _load_table(ptrs + COS_AT, mask, SITE)",
        "sin = _load_table(ptrs + COS_AT, mask, SITE)\n        cos = _load_table(ptrs, mask, SITE)",
        "sin and cos halves of sinu_pos swapped",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "rotary-bwd-not-conjugated",
        "rotary",
        TILE_MATH,
        "x = _rotate(x, sin, cos, True, BLOCK, HALF)",
        "x = _rotate(x, sin, cos, False, BLOCK, HALF)",
        "gradients rotated forward instead of by the transpose rotation",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "rotary-dv-not-rotated-back",
        "rotary",
        TILE_MATH,
        "stride_st, ROTATE_V, IS_BF16, BLOCK, HALF, INTERPRET)",
        "stride_st, False, IS_BF16, BLOCK, HALF, INTERPRET)",
        "dV stored without the transpose rotation although V was rotated",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "rotary-table-block-local",
        "rotary",
        TILE_MATH,
        "_tile(SIN, start, n, start, stride_st, 0, BLOCK, HALF)",
        "_tile(SIN, 0, n, start, stride_st, 0, BLOCK, HALF)",
        "sin/cos read from rows 0..63 for every block instead of the block's own tokens",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "rotary-v-ignores-rotate-v",
        "rotary",
        ATT,
        "    _fwd_out(p, v, h, start, n, O, SIN, stride_ot, stride_oh, stride_st, HEAD_DIM, "
        "BLOCK,\n             ROTATE_V,",
        "    _fwd_out(p, v, h, start, n, O, SIN, stride_ot, stride_oh, stride_st, HEAD_DIM, "
        "BLOCK,\n             ROTARY,",
        "forward rotates V whenever rotary is on, ignoring rotate_v=False",
        env=PORTABLE,  # survived on an H200 without it (its rotary fwd is Gluon)
    ),
    # The rotary backward in column chunks (_bwd_chunks, the D = 128 default): its own table
    # offsets, operand bookkeeping and store calls. The quick tier's rotary cases are D = 64
    # (whole-tile body) or too small to show all of them: the chunked body's agreement with the
    # whole-tile one (1 ulp + 2^-16 of the scale) is what kills them.
    Mutant(
        "chunks-table-offset",
        "rotary",
        TILE_MATH,
        "return _load_sinu(SIN + c * (CW // 2), start, n, stride_st, True, BLOCK, CW // 2,",
        "return _load_sinu(SIN + c * CW, start, n, stride_st, True, BLOCK, CW // 2,",
        "column chunk c reads the sin/cos of pairs c CW.. instead of c CW / 2..",
        tests=CHUNK_TESTS,
    ),
    Mutant(
        "chunks-s-restarted",
        "rotary",
        TILE_MATH,
        "s = _mma_split(q_hi, q_lo, tl.trans(k_hi), tl.trans(k_lo), s, True, True, IEEE,",
        "s = _mma_split(q_hi, q_lo, tl.trans(k_hi), tl.trans(k_lo), s * 0, True, True, IEEE,",
        "the chunked QK^T restarts S at every chunk: only the last chunk's columns score",
        tests=CHUNK_TESTS,
    ),
    Mutant(
        "chunks-dq-first-k-chunk",
        "rotary",
        TILE_MATH,
        "acc = _mma_split(ds_hi, ds_lo, ks[2 * c], ks[2 * c + 1], acc, True, True, IEEE,",
        "acc = _mma_split(ds_hi, ds_lo, ks[0], ks[1], acc, True, True, IEEE,",
        "every chunk of dQ = dS K multiplies by K's first column chunk",
        tests=CHUNK_TESTS,
    ),
    Mutant(
        "chunks-dv-not-rotated-back",
        "rotary",
        TILE_MATH,
        "_store_chunk(DV, acc, SIN, start, n, h, stride_dvt, stride_dvh, stride_st, c, ROTATE_V,",
        "_store_chunk(DV, acc, SIN, start, n, h, stride_dvt, stride_dvh, stride_st, c, False,",
        "chunked backward stores dV without the transpose rotation although V was rotated",
        tests=CHUNK_TESTS,
    ),
    Mutant(
        "store-drops-last-row",
        "rotary",
        TILE_MATH,
        "IS_BF16, INTERPRET), mask=mask)",
        "IS_BF16, INTERPRET), mask=mask & (tl.arange(0, BLOCK) < n - 1)[:, None])",
        "store mask drops the last valid row of every block (inside `_store`)",
    ),
)
