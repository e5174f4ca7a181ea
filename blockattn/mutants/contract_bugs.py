"""Planted bugs against the contract, not the numbers on clean default inputs: a kernel that
ignores a declared option (block size, max_seq_len), reads past a
block into the next sequence, writes its caller's input, or is not repeatable. Each is
invisible to the corpus at block size 64 on clean contiguous inputs, or nearly so; the contract
battery (`blockattn/judge/contract.py`), which every mutant worker runs after the quick tier,
and the cases at other block sizes and layouts are what kill them."""

from __future__ import annotations

from blockattn.mutants.mutant import (
    DISPATCH,
    HOPPER,
    OPS,
    PORTABLE,
    PREFER_GLUON,
    PREFER_HOPPER,
    TILE_MATH,
    TILES,
    Mutant,
)

_G = "contract"

_CONTRACT: tuple[Mutant, ...] = (
    Mutant(
        "block-size-ignored",
        _G,
        OPS,
        "    out = _attention_fwd_op(\n        q, k, v, offsets, sinu_pos, block_size, sm_scale,",
        "    out = _attention_fwd_op(\n        q, k, v, offsets, sinu_pos, 64, sm_scale,",
        "block_attention runs 64-token blocks whatever block_size the caller asked for",
        ci=True,
    ),
    Mutant(
        "loads-unmasked-past-block",
        _G,
        TILE_MATH,
        "    return tl.load(ptrs, mask=mask, other=0.0)",
        "    return tl.load(ptrs)",
        "tiles load all BLOCK rows: a partial block reads the next sequence's rows (and past "
        "the end of the input); masked keys get p = 0, so only 0 * NaN shows it",
        env=PORTABLE,  # fp16 and bf16 rotary bwd are Gluon on sm_90 (2026-11-27)
    ),
    Mutant(
        "max-seq-len-floor",
        _G,
        TILES,
        "        bound = min(bound, B * -(-max_seq_len // block_size))",
        "        bound = min(bound, B * (max_seq_len // block_size))",
        "the tile table sized from max_seq_len rounds down: a last partial block gets no tile",
    ),
    Mutant(
        "output-written-into-q",
        _G,
        DISPATCH,
        "    o = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out",
        "    o = q if out is None else out",
        "the forward writes O over the caller's q (an in-place output)",
    ),
    Mutant(
        "nondeterministic-last-bit",
        _G,
        OPS,
        "    if nested:\n        return torch.nested.nested_tensor_from_jagged(out, offsets)\n"
        "    return out",
        "    if out.numel() and bool(torch.rand(()) < 0.5):  # a race's stand-in\n"
        "        with torch.no_grad():\n"
        "            out.view(-1)[:1] = (out.view(-1)[:1].float() * (1 + 2**-7)).to(out.dtype)\n"
        "    if nested:\n        return torch.nested.nested_tensor_from_jagged(out, offsets)\n"
        "    return out",
        "one element of O is 1 bf16 ulp larger on about half the calls (not repeatable)",
    ),
)

# Planted bugs in the battery itself (its probes and its judge), each removing part of one
# property, for one tensor or position. No kernel under test shows them (a faithful kernel
# passes either way): the battery's known-answer tests, whose witness kernels each break exactly
# that part, are what kill them (issue 42, item 7).
JC = "judge/contract.py"
CC = "cases/contract.py"
WITNESSES = "tests/contract/test_witnesses.py"
PROBES = "tests/contract/test_probes.py"

JUDGE: tuple[Mutant, ...] = (
    Mutant(
        "judge-containment-only-before",
        _G,
        JC,
        "    checked = ~p.affected[:, :, None]  # (T, H, 1)",
        "    checked = ~p.affected[:, :, None] & (pos < a)[:, None, None]  # (T, H, 1)",
        "containment checks only the rows before the poisoned sequence",
        tests=(WITNESSES,),
    ),
    Mutant(
        "judge-containment-o-only",
        _G,
        JC,
        "    for key in KEYS:\n        x, y = out[key], ref[key]",
        "    for key in KEYS[:1]:\n        x, y = out[key], ref[key]",
        "containment compares O only: a leak through the backward (dQ, dK, dV) passes",
        tests=(WITNESSES,),
    ),
    Mutant(
        "judge-containment-excuses-every-head",
        _G,
        CC,
        "    affected[start:end, 0] = True",
        "    affected[start:end, :] = True",
        "containment excuses every head of the poisoned block: a leak across heads passes",
        tests=(WITNESSES,),
    ),
    Mutant(
        "judge-grad-out-never-poisoned",
        _G,
        CC,
        'POISONED = ("q", "k", "v", "grad_out")',
        'POISONED = ("q", "k", "v")',
        "containment never poisons grad_out: a backward that spreads grad_out passes",
        tests=(WITNESSES, PROBES),
    ),
    Mutant(
        "judge-sinu-never-poisoned",
        _G,
        CC,
        "                x[row, (vi * 5) % x.shape[1]] = value",
        "                x[row, (vi * 5) % x.shape[1]] += 0",
        "the rotary containment probe never poisons sinu_pos",
        tests=(WITNESSES, PROBES),
    ),
    Mutant(
        "judge-determinism-forward-only",
        _G,
        JC,
        "            d = [k for k in KEYS if not",
        "            d = [k for k in KEYS[:1] if not",
        "determinism compares O only: a gradient that is not repeatable passes",
        tests=(WITNESSES,),
    ),
    Mutant(
        "judge-layouts-one-head",
        _G,
        CC,
        "HEADS = 2  # >= 2",
        "HEADS = 1  # >= 2",
        "the probes run one head: head strides and (H, T, D) storage are never exercised",
        tests=(WITNESSES, PROBES),
    ),
    Mutant(
        "judge-mixed-layout-unmixed",
        _G,
        CC,
        '    "mixed-1": (_C, "head-strided", "transposed", "token-strided"),',
        '    "mixed-1": ("head-strided",) * 4,',
        "the first mixed layout gives every tensor one layout (q contiguous beside strided "
        "k, v, grad_out is never probed)",
        tests=(PROBES,),
    ),
    Mutant(
        "judge-scale-zero-is-default",
        _G,
        CC,
        'SCALES = {"zero": lambda D: 0.0,',
        'SCALES = {"zero": lambda D: default_scale(D),',
        "the scale-0 probes pass the default scale: a kernel taking 0 as 'unset' passes",
        tests=(WITNESSES, PROBES),
    ),
    Mutant(
        "tma-takes-unpacked-heads",
        _G,
        HOPPER,
        "(H == 1 or t.stride(1) == D)",
        "(H >= 1 or t.stride(1) == D)",
        "TMA eligibility forgets the head stride: a head-strided or (H, T, D)-stored input "
        "goes to the Hopper/Gluon path, which reads heads D apart (the layout probes at H = 2)",
        env=PREFER_HOPPER,
    ),
    Mutant(
        "tma-takes-unpacked-heads-gluon",
        _G,
        HOPPER,
        "(H == 1 or t.stride(1) == D)",
        "(H >= 1 or t.stride(1) == D)",
        "the same eligibility edit under prefer-gluon: the Gluon backward takes a grad_out "
        "whose heads are not packed (the battery's grad-out-transposed probe at H = 2; sm_90)",
        env=PREFER_GLUON,
        needs_sm90=True,
    ),
)

CUT = "tests/providers/test_baselines_cut_at_the_block_size.py"
BASELINES: tuple[Mutant, ...] = (
    Mutant(
        "fa2-cut-at-64",
        _G,
        "providers/fa2.py",
        "    cu = block_cu_seqlens(offsets, block)  # the CASE's block size",
        "    cu = block_cu_seqlens(offsets)  # the CASE's block size",
        "the FA2 baseline cuts cu_seqlens every 64 tokens whatever the case's block size",
        tests=(CUT,),
    ),
    Mutant(
        "fa4-cut-at-64",
        _G,
        "providers/fa4.py",
        "    cu = block_cu_seqlens(offsets, block)\n    res = _varlen_func()(q, k, v, "
        "cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=block,",
        "    cu = block_cu_seqlens(offsets)\n    res = _varlen_func()(q, k, v, "
        "cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=64,",
        "the FA4 baseline cuts cu_seqlens every 64 tokens (max_seqlen 64) whatever the case's "
        "block size",
        tests=(CUT,),
    ),
    Mutant(
        "fa2-negative-scale-passed-through",
        _G,
        "providers/fa2.py",
        "        q, scale = -q, -scale",
        "        pass",
        "the FA2 baseline hands FA2 a negative scale, which its masking turns into NaN",
        tests=("tests/providers/test_fa2_scale_sign.py",),
    ),
    Mutant(
        "baseline-projection-rounded-twice",
        _G,
        "providers/_common.py",
        "    y = x @ w if bias is None else torch.addmm(bias, x, w)",
        "    y = x @ w if bias is None else x @ w + bias",
        "the baselines round x @ w and then add the bias (two roundings, one in their models): "
        "a false alarm where the two nearly cancel",
        tests=("tests/providers/test_baseline_projection_rounding.py",),
    ),
    Mutant(
        "supports-scale-sign-unchecked",
        _G,
        "providers/_base.py",
        "        if sign not in self.scales:",
        "        if False:",
        "a provider's declared scale signs are never checked: FA2 is run at scale 0 (NaN)",
        tests=("tests/providers/test_fa2_scale_sign.py",),
    ),
)

RULES_TESTS = "tests/test_regression_rules.py"
RULES: tuple[Mutant, ...] = (
    Mutant(
        "suite-p50-gets-p9999-slack",
        "suite",
        "judge/verdict.py",
        '(("p50", "p50_growth", "p50_slack_ulp"),',
        '(("p50", "p50_growth", "p9999_slack_ulp"),',
        "the median's regression rule gets p99.99's slack (1 ulp instead of 1/4)",
        tests=(RULES_TESTS,),
    ),
    Mutant(
        "suite-new-violations-one-free",
        "suite",
        "judge/verdict.py",
        'nb["violations"] > ob["violations"] + reg["max_new_violations"]',
        'nb["violations"] > ob["violations"] + reg["max_new_violations"] + 1',
        "one new bound violation is let through as noise",
        tests=(RULES_TESTS,),
    ),
    Mutant(
        "suite-bound-dv-rotated-back-without-rotate-v",
        "suite",
        "../oracles/error_bound.py",
        "                if rotate_v:\n                    e_dv = chain.rotate_back(",
        "                if True:\n                    e_dv = chain.rotate_back(",
        "the bound treats dV of a rotary case with rotate_v=False as rotated back (one more "
        "rounding of |R||dV|: looser dV bounds)",
        tests=("tests/bounds/test_known_answers.py",),
    ),
    Mutant(
        "oracle-softmax-max-over-padding",
        "suite",
        "../oracles/attention.py",
        "    m = s.amax(dim=-1, keepdim=True)",
        "    m = scores.amax(dim=-1, keepdim=True)",
        "the oracle's softmax takes its max over the padding keys of a partial block too: rows "
        "whose scores all lie below FP64's exp underflow become 0/0 (the self-check's extreme "
        "ranges catch it; no corpus case reaches that range)",
        tests=("tests/oracles/test_oracle_validation_selfcheck.py",),
    ),
)

CONTRACT: tuple[Mutant, ...] = _CONTRACT + JUDGE + BASELINES + RULES
