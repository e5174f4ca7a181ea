"""Planted bugs of the fast precision mode (`precision="fast"`, provider blockattn_fast, model
fp32-rounded-operands): each a plausible mistake in the code only that mode runs. The gate's
quick tier judges the accurate kernel, which none of them reaches, so each names the fast mode's
own tests (`tests/kernels/test_fast_precision.py`: its outputs against its own model, and
outside the accurate one) as what must kill it. Group "precision" (the catalog's groups).

- The mode silently not taken: the fast forward or backward op launching the accurate kernels
  (the outputs then meet the fast model but are not the fast arithmetic the caller declared).
- One more input-dtype rounding than the model has: P in Di and dS (`P_bwd`), or the fp32 dP
  (`dP`) - both sit only in the fast (SPLIT off) path, which fp32 inputs share with no effect;
  near-constant V makes dP - Di cancel and shows them.
- The same on the Gluon fast backward (sm_90 only: "not run" elsewhere), and its slot-major
  tile order walking one head per slot.
"""

from __future__ import annotations

from blockattn.mutants.mutant import OPS, PORTABLE, TILE_MATH, Mutant

GLUON_FAST = "kernels/attention_gluon_rotary_fast.py"
FAST_TESTS = ("tests/kernels/test_fast_precision.py",)
_G = "precision"
_RD = "IS_BF16, INTERPRET).to(tl.float32)"  # tail of `_round_to(x, DT, ...)` back to fp32

FAST: tuple[Mutant, ...] = (
    Mutant(
        "fast-fwd-ignored",
        _G,
        OPS,
        'rotate_v, max_seq_len,\n                       "fast")',
        'rotate_v, max_seq_len,\n                       "accurate")',
        "the fast forward op launches the accurate kernels: precision='fast' silently ignored",
        tests=FAST_TESTS,
    ),
    Mutant(
        "fast-bwd-ignored",
        _G,
        OPS,
        'max_seq_len, "fast")',
        'max_seq_len, "accurate")',
        "the fast backward op launches the accurate backward: precision='fast' silently ignored "
        "in the gradients",
        tests=FAST_TESTS,
    ),
    Mutant(
        "fast-p-rounded-in-ds",
        _G,
        TILE_MATH,
        "ds = _ds(p, dp, CENTRED)",
        f"ds = _ds(p if SPLIT else _round_to(p, q.dtype, {_RD}, dp, CENTRED)",
        "fast mode: the P of Di and dS rounded to the input dtype (the rounded P of the GEMMs "
        "reused), P_bwd u_in where the model has 0",
        tests=FAST_TESTS,
        env=PORTABLE,  # on sm_90 the Gluon fast backward takes these cases
    ),
    Mutant(
        "fast-dp-rounded",
        _G,
        TILE_MATH,
        "ds = _ds(p, dp, CENTRED)",
        f"ds = _ds(p, dp if SPLIT else _round_to(dp, q.dtype, {_RD}, CENTRED)",
        "fast mode: the fp32 dP = dO V^T rounded to the input dtype before Di and dS",
        tests=FAST_TESTS,
        env=PORTABLE,  # on sm_90 the Gluon fast backward takes these cases
    ),
    Mutant(
        "gluon-fast-dp-rounded",
        _G,
        GLUON_FAST,
        "ds = p * (dp - gl.expand_dims(gl.sum(p * dp, axis=1), 1))  # Di in one pass",
        "dp = dp.to(dtype).to(gl.float32)\n"
        "            ds = p * (dp - gl.expand_dims(gl.sum(p * dp, axis=1), 1))",
        "Gluon fast backward: the fp32 dP rounded to the input dtype before Di and dS",
        tests=FAST_TESTS,
        needs_sm90=True,
    ),
    Mutant(
        "gluon-fast-slot-major-one-head",
        _G,
        GLUON_FAST,
        "    return ((n_tiles // S - vp + n_vp - 1) // n_vp) * S\n",
        "    return (n_tiles // S - vp + n_vp - 1) // n_vp\n",
        "Gluon fast rotary kernels: a program walks its slots' first head only (the slot-major "
        "tile order's count not multiplied by H): the other heads' outputs are never written",
        tests=FAST_TESTS,
        needs_sm90=True,
    ),
)
