"""The bench's timed entries, taken from the providers themselves (`blockattn.providers`): every
provider's `timings_of` (built-ins declare theirs; an outside kernel is timed through its
attention callable). No second provider definition lives in the bench."""

from __future__ import annotations

from blockattn import providers
from blockattn.providers import Provider, Timing


def entries() -> dict[str, Timing]:
    """Every timed entry of every provider known now (built-ins, then loaded outside kernels)."""
    out: dict[str, Timing] = {}
    for prov in providers.all_providers().values():
        for t in providers.timings_of(prov):
            out.setdefault(t.name, t)
    return out


def builtin_entries() -> dict[str, Timing]:
    return {t.name: t for p in providers.all_providers().values() if p.origin == "builtin"
            for t in providers.timings_of(p)}  # fmt: skip


def entry(name: str) -> Timing:
    known = entries()
    if name not in known:
        raise ValueError(f"unknown bench provider {name!r}; known {sorted(known)}")
    return known[name]


def add_outside(prov: Provider) -> tuple[str, ...]:
    """The bench entries of an outside provider (plain, and fused rotary when it declares it);
    refused when one would shadow a built-in's entry."""
    names = tuple(t.name for t in providers.timings_of(prov))
    clash = sorted(set(names) & set(builtin_entries()))
    if clash:
        raise ValueError(f"--provider {prov.name!r}: bench entry {clash[0]!r} is a built-in")
    return names
