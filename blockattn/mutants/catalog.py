"""Planted bugs: each a small, realistic mistake as (file, exact anchor text -> replacement).

A mutant is applied to a *copy* of the package (see `blockattn.mutants.apply`), never to the
working tree. Every anchor must occur exactly once in the current source: a kernel edit that
moves or rewrites an anchor makes `tests/mutants/test_mutants.py` fail loudly instead of
silently testing nothing.

Groups:
- "core": masking, scaling, softmax/Di, gradient plumbing, strides, tile table, autograd.
- "contract": a declared option ignored, reads past a block, the caller's input written, a
  result that is not repeatable (`contract_bugs.py`; killed by the contract battery).
- "rotary": anchors inside `_rotate`, `_load_sinu`, `_store` and the rotation call sites. Those
  functions are the ones most often edited (register-pressure work), so their anchors are kept
  apart and re-checked on every test run.
- "precision" also holds the fast precision mode's own bugs (`fast_bugs.py`; killed by that
  mode's tests, since the gate judges the accurate kernel).
`ci = True` marks the subset CPU CI runs on every push (one per bug class, cheap to kill).
"""

from __future__ import annotations

from blockattn.mutants.contract_bugs import CONTRACT
from blockattn.mutants.fast_bugs import FAST
from blockattn.mutants.isolation_bugs import ISOLATION
from blockattn.mutants.kernel_bugs import CORE, ROTARY
from blockattn.mutants.mutant import Mutant
from blockattn.mutants.precision import PRECISION
from blockattn.mutants.suite import SUITE

MUTANTS: tuple[Mutant, ...] = CORE + ROTARY + PRECISION + FAST + SUITE + CONTRACT + ISOLATION


def by_name(names: list[str] | None = None) -> list[Mutant]:
    """The named mutants (all when None); unknown names are a usage error naming them."""
    if not names:
        return list(MUTANTS)
    known = {m.name: m for m in MUTANTS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"--mutant: unknown mutant(s) {unknown}; known: {sorted(known)}")
    return [known[n] for n in names]
