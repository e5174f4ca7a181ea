"""Planted memory bugs: a read past the end of a tensor whose value is never used, so no output
changes and no test of the numbers can see it. compute-sanitizer's memcheck is what catches
them: `ci/sanitize.sh` applies each to a copy of the package and fails unless memcheck reports
it (the sanitizer's own known answers). Kept out of `catalog.MUTANTS`: the mutant runner
judges by verdicts, which these leave as they are by construction."""

from __future__ import annotations

from blockattn.mutants.mutant import ATT, GLUON, GLUON_CHAINS_1, PORTABLE, PREFER_GLUON, Mutant

_G = "memory"

MEMORY: tuple[Mutant, ...] = (
    Mutant(
        "gluon-row0-reads-past-tensor",
        _G,
        GLUON,
        "mask=(cols < HD) & (n > 0),",
        "mask=cols < HD,",
        "Gluon one-chain backward: V's first row read for padding slots too (n = 0, start = T): "
        "one row past the tensor, never used (the bug 7ac8229 fixed)",
        env=PREFER_GLUON + GLUON_CHAINS_1,
        needs_sm90=True,
    ),
    Mutant(
        "portable-fwd-k-unmasked",
        _G,
        ATT,
        "        k = _load(_tile(K, start, n, h, stride_kt, stride_kh, BLOCK, HEAD_DIM))\n"
        "        if not LOAD_V_LATE:",
        "        k = tl.load(_tile(K, start, n, h, stride_kt, stride_kh, BLOCK, HEAD_DIM)[0])\n"
        "        if not LOAD_V_LATE:",
        "portable forward: K's tile loaded without its row mask: a partial last block and the "
        "padding slots read rows past T, whose scores the softmax masks anyway",
        env=PORTABLE,
        needs_gpu=True,
    ),
)
