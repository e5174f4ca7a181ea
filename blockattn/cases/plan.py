"""Which cases a run, gate or pytest session judges: corpus + fuzz, filtered, sharded.

One function (`plan_specs`) so that `run`, `gate`, `false-alarms` and the pytest plugin select the
very same cases from the same options: a failure in one is a case the others would run too.
The fuzz sample is drawn from the profile's space *restricted to what the provider under test
declares it supports* (its `Supports`), so no fuzz budget is spent on configurations it refuses.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI imports Selection before torch may load (blockattn/names.py)
    from blockattn.cases.spec import CaseSpec


@dataclass(frozen=True)
class Selection:
    """Filters (None: no filter) and the shard (index, count), index 1-based."""

    dtypes: tuple[str, ...] | None = None
    head_dims: tuple[int, ...] | None = None
    variants: tuple[str, ...] | None = None
    distributions: tuple[str, ...] | None = None
    cases: tuple[str, ...] | None = None  # case ids or case names
    shard: tuple[int, int] | None = None
    # Balance the shard by measured cost (blockattn.cases.shard_costs): the table's path and its
    # sha256, so that `blockattn merge` refuses shards split by different tables.
    shard_costs: str | None = None
    shard_costs_sha256: str | None = None

    def keeps(self, s: CaseSpec) -> bool:
        return (
            (self.dtypes is None or s.dtype in self.dtypes)
            and (self.head_dims is None or s.D in self.head_dims)
            and (self.variants is None or s.variant in self.variants)
            and (self.distributions is None or s.distribution in self.distributions)
            and (self.cases is None or s.case_id in self.cases or s.name in self.cases)
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def restricted_space(space: Any, sel: Selection, supports: Any) -> Any | None:
    """The fuzz space cut down to the filters and the provider's declared support (None: empty)."""
    dtypes = tuple(d for d in space.dtypes if d in supports.dtypes
                   and (sel.dtypes is None or d in sel.dtypes))  # fmt: skip
    dims = tuple(d for d in space.head_dims
                 if (supports.head_dims is None or d in supports.head_dims)
                 and (sel.head_dims is None or d in sel.head_dims))  # fmt: skip
    variants = tuple(v for v in space.variants
                     if (sel.variants is None or v in sel.variants)
                     and (v == "plain" or supports.rotary)
                     and (v != "projection" or supports.projection))  # fmt: skip
    dists = tuple(d for d in space.distributions
                  if sel.distributions is None or d in sel.distributions)  # fmt: skip
    declared = getattr(supports, "block_sizes", None)
    blocks = tuple(b for b in space.block_sizes if declared is None or b in declared)
    odts = tuple(d for d in space.offsets_dtypes
                 if d in getattr(supports, "offsets_dtypes", ("int32",)))  # fmt: skip
    msls = tuple(m for m in space.max_seq_lens
                 if m == "omitted" or getattr(supports, "max_seq_len", False))  # fmt: skip
    if not (dtypes and dims and variants and dists and blocks and odts):
        return None
    return dataclasses.replace(space, dtypes=dtypes, head_dims=dims, variants=variants,
                               distributions=dists, gqa=space.gqa and supports.gqa,
                               block_sizes=blocks, offsets_dtypes=odts,
                               max_seq_lens=msls)  # fmt: skip


def shard(specs: list[CaseSpec], index: int, count: int) -> list[CaseSpec]:
    """Round-robin over the plan's order: shards are disjoint, cover it, and differ by <= 1."""
    return specs[index - 1 :: count]


def plan_specs(
    device: str,
    *,
    profile: str,
    under_test_supports: Any,
    fuzz: int,
    seed: int,
    corpus: bool = True,
    shape_p: bool = False,
    selection: Selection = Selection(),
    max_cases: int | None = None,
) -> list[CaseSpec]:
    from blockattn.cases import strategies
    from blockattn.cases.corpus import corpus_for_device

    specs: list[CaseSpec] = list(corpus_for_device(device)) if corpus else []
    if shape_p:
        specs += shape_p_specs()
    if fuzz:
        space = restricted_space(strategies.SPACES[profile], selection, under_test_supports)
        if space is not None:
            specs += strategies.sample_specs(space, fuzz, seed)
    specs = [s for s in specs if selection.keeps(s)]
    if selection.cases is not None:
        found = {s.case_id for s in specs} | {s.name for s in specs}
        missing = [c for c in selection.cases if c not in found]
        if missing:
            raise ValueError(f"--case {', '.join(missing)}: no such case in this plan (corpus "
                             "names or case ids; fuzz ids depend on --seed, --fuzz and --profile)")
    if max_cases is not None:
        specs = specs[:max_cases]
    if selection.shard is not None and selection.shard_costs is not None:
        from blockattn.cases import shard_costs

        if shard_costs.digest(selection.shard_costs) != selection.shard_costs_sha256:
            raise ValueError(f"--shard-costs {selection.shard_costs}: changed since it was read")
        table = shard_costs.load_costs(selection.shard_costs)
        specs = shard_costs.balanced_shard(specs, *selection.shard, table)
    elif selection.shard is not None:
        specs = shard(specs, *selection.shard)
    return specs


def shape_p_specs() -> list[CaseSpec]:
    """The production shape P (DEVELOPERS.md), plain and fused rotary, bf16 D=128."""
    from blockattn.cases.spec import CaseSpec

    shape = dict(B=1152, max_len=4096, sparsity=0.7, H=4, D=128, dtype="bfloat16", seed=7)
    return [
        CaseSpec(variant=v, source="shape-p", name=f"shape-P-{v}-bf16-d128", **shape)
        for v in ("plain", "rotary")
    ]
