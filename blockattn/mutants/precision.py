"""Precision-class planted bugs: each loses a few bits somewhere in the kernels' fp32/hi-lo
pipeline, without crashing or producing a gross error. They are the regressions a suite that only
checks "close to a reference" lets through; they exist to measure how sensitive the suite is.

Every anchor occurs exactly once in the current `kernels/tile_math.py` (the catalog's rule), or,
for the "gluon-" ones, in `kernels/attention_gluon.py` (sm_90 only: run where a GPU has it).
Roundings use the file's own `_round_to` (round to nearest even on every backend, so the
interpreter shows what a GPU would), not a bare `.to(q.dtype)`, which truncates bf16 under the
interpreter. Which cases can show each bug is in its description: "rotary" needs fused rotary,
"rotate_v" a rotated V, "fp16" fp16 inputs, "near-constant"/"saturated" inputs whose dP - Di
cancels (see `_bwd_tile`).

`catalog.MUTANTS` includes them; `fwd-p-lo-dropped` is in the CPU CI subset.
"""

from __future__ import annotations

from blockattn.mutants.mutant import (
    CHUNK_BWD_TEST,
    CHUNK_TESTS,
    GLUON,
    GLUON_CHAINS_1,
    GLUON_CHAINS_2,
    GLUON_ROTARY,
    GLUON_ROTARY_FWD,
    GLUON_ROTARY_TESTS,
    PORTABLE,
    PREFER_GLUON,
    TILE_MATH,
    Mutant,
)

_G = "precision"
_RD = "IS_BF16, INTERPRET).to(tl.float32)"  # tail of `_round_to(x, DT, ...)` back to fp32

PRECISION: tuple[Mutant, ...] = (
    # ------------------------------------------------------------------ forward GEMMs
    Mutant(
        "fwd-p-lo-dropped",
        _G,
        TILE_MATH,
        "acc = _mma_split(p_hi, p_lo, v_hi, v_lo, acc, True, ROTATE_V, IEEE, INTERPRET)",
        "acc = _mma_split(p_hi, p_lo, v_hi, v_lo, acc, False, ROTATE_V, IEEE, INTERPRET)",
        "forward PV with P rounded to the input dtype (p_lo dropped), as FA v2 does",
        ci=True,
    ),
    Mutant(
        "fwd-v-lo-dropped",
        _G,
        TILE_MATH,
        "acc = _mma_split(p_hi, p_lo, v_hi, v_lo, acc, True, ROTATE_V, IEEE, INTERPRET)",
        "acc = _mma_split(p_hi, p_lo, v_hi, v_lo, acc, True, False, IEEE, INTERPRET)",
        "forward PV drops the rotated V's lo half (rotate_v)",
        env=PORTABLE,  # survived on an H200 without it (its rotary fwd is Gluon)
    ),
    Mutant(
        "fwd-qk-lo-dropped",
        _G,
        TILE_MATH,
        "p = _probs(q_hi, q_lo, k_hi, k_lo, n, qk_scale, ROTARY and SPLIT, IEEE, INTERPRET, BLOCK)",
        "p = _probs(q_hi, q_lo, k_hi, k_lo, n, qk_scale, False, IEEE, INTERPRET, BLOCK)",
        "forward QK^T drops the rotated q and k lo halves (rotary; the backward keeps them)",
        env=PORTABLE,  # survived on an H200 without it (its rotary fwd is Gluon)
    ),
    Mutant(
        "s-rounded-before-softmax",
        _G,
        TILE_MATH,
        's = tl.where((tl.arange(0, BLOCK) < n)[None, :], s * qk_scale, float("-inf"))',
        "s = tl.where((tl.arange(0, BLOCK) < n)[None, :], "
        's.to(tl.bfloat16).to(tl.float32) * qk_scale, float("-inf"))',
        "the fp32 S = QK^T accumulator rounded to bf16 before the softmax (fwd and bwd "
        "recompute; _softmax has no input dtype at hand, so bf16 for both 16-bit dtypes)",
    ),
    # ------------------------------------------------------------------ backward GEMMs
    Mutant(
        "bwd-qk-lo-dropped",
        _G,
        TILE_MATH,
        "p = _probs(q_hi, q_lo, k_hi, k_lo, n, qk_scale, QK_LO, IEEE, INTERPRET, BLOCK)",
        "p = _probs(q_hi, q_lo, k_hi, k_lo, n, qk_scale, False, IEEE, INTERPRET, BLOCK)",
        "backward's QK^T recompute drops the rotated q and k lo halves (rotary)",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "dp-v-lo-dropped",
        _G,
        TILE_MATH,
        "dp = _mma_split(do, do, tl.trans(v_hi), tl.trans(v_lo), dp, False, V_LO, IEEE, INTERPRET)",
        "dp = _mma_split(do, do, tl.trans(v_hi), tl.trans(v_lo), dp, False, False, IEEE, "
        "INTERPRET)",
        "dO V^T drops V's lo half: the centred (or rotated) V enters rounded to the input dtype",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "chunks-qk-lo-dropped",
        _G,
        TILE_MATH,
        "s = _mma_split(q_hi, q_lo, tl.trans(k_hi), tl.trans(k_lo), s, True, True, IEEE,",
        "s = _mma_split(q_hi, q_lo, tl.trans(k_hi), tl.trans(k_lo), s, False, False, IEEE,",
        "chunked QK^T (forward and backward) drops the rotated q and k lo halves",
        tests=CHUNK_TESTS,
    ),
    Mutant(
        "chunks-dp-v-lo-dropped",
        _G,
        TILE_MATH,
        "dp = _mma_split(do, do, tl.trans(v_hi), tl.trans(v_lo), dp, False, True, IEEE,",
        "dp = _mma_split(do, do, tl.trans(v_hi), tl.trans(v_lo), dp, False, False, IEEE,",
        "chunked backward's dO V^T drops V's lo half (the centred, rotated V rounded)",
        tests=(CHUNK_BWD_TEST,),
    ),
    Mutant(
        "dp-rounded",
        _G,
        TILE_MATH,
        "dp = _mma_split(do, do, tl.trans(v_hi), tl.trans(v_lo), dp, False, V_LO, IEEE, INTERPRET)",
        "dp = _round_to(_mma_split(do, do, tl.trans(v_hi), tl.trans(v_lo), dp, False, V_LO, IEEE,"
        f" INTERPRET), q.dtype, {_RD}",
        "the fp32 dP = dO V^T accumulator rounded to the input dtype before Di and dS",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "dv-p-lo-dropped",
        _G,
        TILE_MATH,
        "acc = _mma_split(tl.trans(p_hi), tl.trans(p_lo), do, do, acc, True, False, IEEE,",
        "acc = _mma_split(tl.trans(p_hi), tl.trans(p_lo), do, do, acc, False, False, IEEE,",
        "dV = P^T dO with P rounded to the input dtype (p_lo dropped in dV only)",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "dq-ds-lo-dropped",
        _G,
        TILE_MATH,
        "acc = _mma_split(ds_hi, ds_lo, k_hi, k_lo, acc, SPLIT, QK_LO, IEEE, INTERPRET)",
        "acc = _mma_split(ds_hi, ds_lo, k_hi, k_lo, acc, False, QK_LO, IEEE, INTERPRET)",
        "dQ = dS K with dS rounded to the input dtype (ds_lo dropped in dQ only)",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "dk-ds-lo-dropped",
        _G,
        TILE_MATH,
        "acc = _mma_split(tl.trans(ds_hi), tl.trans(ds_lo), q_hi, q_lo, acc, SPLIT, QK_LO, IEEE,",
        "acc = _mma_split(tl.trans(ds_hi), tl.trans(ds_lo), q_hi, q_lo, acc, False, QK_LO, IEEE,",
        "dK = dS^T Q with dS rounded to the input dtype (ds_lo dropped in dK only)",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "dq-k-lo-dropped",
        _G,
        TILE_MATH,
        "acc = _mma_split(ds_hi, ds_lo, k_hi, k_lo, acc, SPLIT, QK_LO, IEEE, INTERPRET)",
        "acc = _mma_split(ds_hi, ds_lo, k_hi, k_lo, acc, SPLIT, False, IEEE, INTERPRET)",
        "dQ = dS K drops the rotated k's lo half (rotary)",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "dk-q-lo-dropped",
        _G,
        TILE_MATH,
        "acc = _mma_split(tl.trans(ds_hi), tl.trans(ds_lo), q_hi, q_lo, acc, SPLIT, QK_LO, IEEE,",
        "acc = _mma_split(tl.trans(ds_hi), tl.trans(ds_lo), q_hi, q_lo, acc, SPLIT, False, IEEE,",
        "dK = dS^T Q drops the rotated q's lo half (rotary)",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    # ------------------------------------------------------------------ stores
    Mutant(
        "dq-store-double-rounding",
        _G,
        TILE_MATH,
        "_store(_tile(DQ, start, n, h, stride_dqt, stride_dqh, BLOCK, HEAD_DIM), acc * sm_scale,",
        "_store(_tile(DQ, start, n, h, stride_dqt, stride_dqh, BLOCK, HEAD_DIM), "
        f"_round_to(acc, q.dtype, {_RD} * sm_scale,",
        "dQ rounded twice: the accumulator to the input dtype, then again after * sm_scale (a "
        "power of two at D=64: no effect there without rotary; fp16: the scaled dS makes the "
        "accumulator overflow fp16, a gross error)",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "dk-store-double-rounding",
        _G,
        TILE_MATH,
        "_store(_tile(DK, start, n, h, stride_dkt, stride_dkh, BLOCK, HEAD_DIM), acc * sm_scale,",
        "_store(_tile(DK, start, n, h, stride_dkt, stride_dkh, BLOCK, HEAD_DIM), "
        f"_round_to(acc, q.dtype, {_RD} * sm_scale,",
        "dK rounded twice: the accumulator to the input dtype, then again after * sm_scale (as "
        "for dQ)",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "dq-rounded-before-rotation",
        _G,
        TILE_MATH,
        "_store(_tile(DQ, start, n, h, stride_dqt, stride_dqh, BLOCK, HEAD_DIM), acc * sm_scale,",
        "_store(_tile(DQ, start, n, h, stride_dqt, stride_dqh, BLOCK, HEAD_DIM), "
        f"_round_to(acc * sm_scale, q.dtype, {_RD},",
        "dQ rounded to the input dtype before the conjugate rotation, then again at the store "
        "(rotary)",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "dv-rounded-before-rotation",
        _G,
        TILE_MATH,
        "_store(_tile(DV, start, n, h, stride_dvt, stride_dvh, BLOCK, HEAD_DIM), acc,",
        "_store(_tile(DV, start, n, h, stride_dvt, stride_dvh, BLOCK, HEAD_DIM), "
        f"_round_to(acc, q.dtype, {_RD},",
        "dV rounded to the input dtype before the conjugate rotation, then again at the store "
        "(rotate_v)",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    # ------------------------------------------------------------------ rotary in the input dtype
    Mutant(
        "rotation-in-input-dtype",
        _G,
        TILE_MATH,
        "xr = _rotate(x.to(tl.float32), sin, cos, False, BLOCK, HALF)\n        if SPLIT:",
        "xr = _round_to(_rotate(x.to(tl.float32), _round_to(sin, x.dtype, "
        f"{_RD}, _round_to(cos, x.dtype, {_RD}, False, BLOCK, HALF), x.dtype, "
        f"{_RD}\n        if SPLIT:",
        "q/k (and the forward's V) rotated in the input dtype: sin/cos and the rotated tile "
        "rounded to it, so the tile's lo half is 0 (rotary)",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "conj-rotation-in-input-dtype",
        _G,
        TILE_MATH,
        "x = _rotate(x, sin, cos, True, BLOCK, HALF)",
        "x = _rotate(_round_to(x, tile[0].dtype.element_ty, "
        f"{_RD}, _round_to(sin, tile[0].dtype.element_ty, {_RD}, "
        f"_round_to(cos, tile[0].dtype.element_ty, {_RD}, True, BLOCK, HALF)",
        "the gradients' conjugate rotation done in the input dtype: the fp32 gradient and "
        "sin/cos rounded to it first, the result rounded again at the store (rotary)",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    # ------------------------------------------------------------------ the centred dP - Di
    Mutant(
        "v-centring-skipped",
        _G,
        TILE_MATH,
        "xc = x.to(tl.float32) - _load(row0).to(tl.float32)",
        "xc = x.to(tl.float32)",
        "the plain V enters dO V^T uncentred (its first row not subtracted): dP - Di cancels "
        "in fp32 again (near-constant V; rotary with rotate_v=False too)",
        env=PORTABLE,  # survived on an H200 without it (its plain bwd is Gluon)
    ),
    Mutant(
        "di-second-pass-dropped",
        _G,
        TILE_MATH,
        "return p * (dp - tl.sum(p * dp, axis=1)[:, None])",
        "return p * dp",
        "Di's second pass dropped: dS = P * (dP - Di0) with the fp32 first-pass Di0, whose "
        "rounding dP - Di then carries (near-constant or saturated inputs)",
        env=PORTABLE,  # survived on an H200 without it (its plain bwd is Gluon)
    ),
    Mutant(
        "ds-fp16-scale-dropped",
        _G,
        TILE_MATH,
        "            ds = ds * ds_up\n            sm_scale = sm_scale * ds_down\n",
        "",
        "fp16 dS split without its power-of-two scale: the lo half of a small dS falls below "
        "fp16's normal range (fp16, small dS as with near-constant V)",
        env=PORTABLE,  # survived on an H200 without it (its plain bwd is Gluon)
    ),
    # ------------------------------------------------------------------ the Gluon backward
    Mutant(
        "gluon-dv-p-lo-dropped",
        _G,
        GLUON,
        "dv = warpgroup_mma(pd_s.index(1).permute((1, 0)), dob, zo, use_acc=False,\n"
        "                               is_async=True)",
        "dv = zo",
        "Gluon path: dV = P^T dO with P rounded to the input dtype (its lo half dropped)",
        env=PREFER_GLUON + GLUON_CHAINS_1,
        needs_sm90=True,
    ),
    Mutant(
        "gluon-v-uncentred",
        _G,
        GLUON,
        "return gl.load(V + start * stride_vt + h * stride_vh + cols, mask=(cols < HD) & (n > 0),"
        "\n                   other=0.0).to(gl.float32)",
        "return gl.zeros([HD], gl.float32, gl.SliceLayout(0, lay))",
        "Gluon path: V enters dO V^T uncentred: dP - Di cancels in fp32 again (near-constant V)",
        env=PREFER_GLUON + GLUON_CHAINS_1,
        needs_sm90=True,
    ),
    Mutant(
        "gluon-ds-fp16-scale-dropped",
        _G,
        GLUON,
        "        b = up\n        dscale = sm_scale * down\n",
        "        b = 1.0\n",
        "Gluon path: fp16 dS split without its power-of-two scale (fp16, small dS)",
        env=PREFER_GLUON + GLUON_CHAINS_1,
        needs_sm90=True,
    ),
    Mutant(
        "gluon2-dp-v-lo-dropped",
        _G,
        GLUON,
        "dp = warpgroup_mma(dob, yb.permute((1, 0)), zs, use_acc=False, is_async=True)",
        "dp = zs",
        "Gluon two-chain kernel: dP = dO (V - V_0)^T with V - V_0 rounded to the input dtype "
        "(its lo half dropped)",
        env=PREFER_GLUON + GLUON_CHAINS_2,
        needs_sm90=True,
    ),
    Mutant(
        "gluon-rot-s-q-lo-dropped",
        _G,
        GLUON_ROTARY,
        "    sc = warpgroup_mma(q_lo, k_hi.permute((1, 0)), zs, use_acc=False)",
        "    sc = zs",
        "Gluon rotary backward: S = Q K^T without the rotated q's lo half (q rounded to the "
        "input dtype after the rotation)",
        env=PREFER_GLUON,
        needs_sm90=True,
        tests=GLUON_ROTARY_TESTS,
    ),
    Mutant(
        "gluon-rot-fwd-s-k-lo-dropped",
        _G,
        GLUON_ROTARY_FWD,
        "            sc = warpgroup_mma(a_s, f_s.permute((1, 0)), sc, is_async=True)\n",
        "",
        "Gluon rotary forward: S = Q K^T without the rotated k's lo half (k rounded to the "
        "input dtype after the rotation)",
        env=PREFER_GLUON,
        needs_sm90=True,
        tests=GLUON_ROTARY_TESTS,
    ),
    Mutant(
        "gluon-rot-fwd-o-p-lo-dropped",
        _G,
        GLUON_ROTARY_FWD,
        "            o = warpgroup_mma(p_s.index(1), c_s, zo, use_acc=False, is_async=True)",
        "            o = zo",
        "Gluon rotary forward: O = P V without P's lo half (P rounded to the input dtype)",
        env=PREFER_GLUON,
        needs_sm90=True,
        tests=GLUON_ROTARY_TESTS,
    ),
    # The bf16 split written in PTX (tile_math.SPLIT_BF16X2_PTX, two elements per conversion,
    # shared by the portable kernels and the Gluon backward): the interpreter never runs it (it
    # keeps the compiler's form, _round_to's shim), so this runs on a GPU only.
    Mutant(
        "packed-split-lo-dropped",
        _G,
        TILE_MATH,
        "            sub.rn.f32 b, $3, b;\n            cvt.rn.bf16x2.f32 $1, b, a;",
        "            sub.rn.f32 b, $3, b;\n            mov.b32 $1, 0;",
        "on a GPU: the packed bf16 split's lo half dropped (operands rounded to the input "
        "dtype: the portable forward's q, k, V, P; the Gluon backward's V, P and rotary q, k)",
        needs_gpu=True,
    ),
)
