"""Planted bugs against the contract, not the numbers on clean default inputs: a kernel that
ignores a declared option (block size, max_seq_len), reads past a
block into the next sequence, writes its caller's input, or is not repeatable. Each is
invisible to the corpus at block size 64 on clean contiguous inputs, or nearly so; the contract
battery (`blockattn/judge/contract.py`), which every mutant worker runs after the quick tier,
and the cases at other block sizes and layouts are what kill them."""

from __future__ import annotations

from blockattn.mutants.mutant import DISPATCH, OPS, PORTABLE, TILE_MATH, TILES, Mutant

_G = "contract"

CONTRACT: tuple[Mutant, ...] = (
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
