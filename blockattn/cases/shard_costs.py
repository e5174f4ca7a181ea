"""Gate/run shards balanced by measured case cost (`--shard I/N --shard-costs FILE`).

Round-robin shards (`plan.shard`) hold equal case counts, not equal time: one shard that draws
the large cases ends the CI job last. With a cost table (seconds per case id, from an earlier
run: a `report.json` such as a stored CI baseline, a `results.jsonl`, a report directory, or a
JSON mapping) the cases are assigned longest-processing-time first: in decreasing cost, each
to the shard with the least cost so far (ties: the lower shard). A case the table does not
know (a fuzz draw of another seed, a new corpus case) is estimated from its size (below).
Every shard computes the same assignment from the same plan and table, so the shards are
disjoint and cover the plan, as round-robin ones are; `blockattn merge` refuses shards run
with another table (its sha256 is part of the recorded selection).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from blockattn.cases.spec import CaseSpec


def _file(path: str | Path) -> Path:
    """The file a cost table is read from: itself, or a report directory's report.json (else
    its results.jsonl)."""
    p = Path(path)
    if p.is_dir():
        for name in ("report.json", "results.jsonl"):
            if (p / name).is_file():
                return p / name
        raise ValueError(f"--shard-costs {p}: no report.json or results.jsonl in it")
    return p


def digest(path: str | Path) -> str:
    return hashlib.sha256(_file(path).read_bytes()).hexdigest()


def load_costs(path: str | Path) -> dict[str, float]:
    """Seconds per case id from a report.json (cases[].wall_s), a results.jsonl (wall_s per
    line), a report directory holding either, or a JSON object {case_id: s} (optionally under
    "costs"). Raises ValueError when the file holds no cost."""
    p = _file(path)
    text = p.read_text()
    costs: dict[str, float] = {}
    if p.suffix == ".jsonl":
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        data = json.loads(text)
        if isinstance(data, dict) and isinstance(data.get("cases"), list):
            records = data["cases"]
        else:
            table = data.get("costs", data) if isinstance(data, dict) else None
            if not isinstance(table, dict):
                raise ValueError(f"--shard-costs {p}: not a report, results or cost table")
            records = [{"case_id": k, "wall_s": v} for k, v in table.items()]
    for r in records:
        cid, s = r.get("case_id"), r.get("wall_s")
        if isinstance(cid, str) and isinstance(s, int | float) and s >= 0:
            costs[cid] = float(s)
    if not costs:
        raise ValueError(f"--shard-costs {p}: no case with a wall_s cost in it")
    return costs


def size(spec: CaseSpec) -> float:
    """Elements of one (T, H, D) tensor, T the sum of the lengths or its expectation."""
    if spec.lengths is not None:
        T = float(sum(spec.lengths))
    else:
        T = spec.B * spec.max_len * (1.0 - spec.sparsity)
    return max(1.0, T) * spec.H * spec.D


def estimate(spec: CaseSpec, known: dict[str, float], sizes: dict[str, float]) -> float:
    """An unknown case's cost: a fixed part (the median known cost: compilation, the oracle's
    and the battery's set-up) plus the median seconds per element times its size, clamped to
    [min, max] of the known costs times 2."""
    vals = sorted(known.values())
    base = statistics.median(vals)
    rates = [known[c] / sizes[c] for c in known if c in sizes]
    per_elem = statistics.median(rates) if rates else 0.0
    return min(max(vals) * 2, max(vals[0], base + per_elem * size(spec)))


def lpt_assign(costs: list[float], count: int) -> list[int]:
    """Shard index (0-based) of each job: longest processing time first, each to the least
    loaded shard (ties: the lower shard, then the earlier job)."""
    load = [0.0] * count
    out = [0] * len(costs)
    for j in sorted(range(len(costs)), key=lambda j: (-costs[j], j)):
        s = min(range(count), key=lambda i: (load[i], i))
        out[j] = s
        load[s] += costs[j]
    return out


def case_costs(specs: list[CaseSpec], table: dict[str, float]) -> list[float]:
    """Each spec's cost: measured where the table has it, else estimated; with no measured case
    of this plan in the table, the sizes alone (relative costs)."""
    sizes = {s.case_id: size(s) for s in specs}
    known = {c: table[c] for c in sizes if c in table}
    if not known:
        return [sizes[s.case_id] for s in specs]
    return [known[s.case_id] if s.case_id in known else estimate(s, known, sizes) for s in specs]


def balanced_shard(specs: list[CaseSpec], index: int, count: int,
                   table: dict[str, float]) -> list[CaseSpec]:  # fmt: skip
    """Shard `index` (1-based) of `count` by LPT over the cases' costs, in plan order."""
    where = lpt_assign(case_costs(specs, table), count)
    return [s for s, w in zip(specs, where, strict=True) if w == index - 1]


def shard_loads(specs: list[CaseSpec], count: int, table: dict[str, float]) -> list[float]:
    """Predicted seconds of each shard (0-based list), for the CI log and the tests."""
    costs = case_costs(specs, table)
    loads = [0.0] * count
    for c, w in zip(costs, lpt_assign(costs, count), strict=True):
        loads[w] += c
    return loads
