"""Claims file (claims/claims.toml): schema, validation and the decision rule of a verdict.

Each [[claim]] names what is measured and what the claim says about it:
    id, statement, source             identity and where the claim was made
    made_for = "NVIDIA B200"          optional: hardware the claim was made for; on another GPU it
                                      is measured here and labelled "measured on <GPU>"
    kind = speed | accuracy | oracle_time
    provider, reference               speed: blockattn.bench providers (reference = the fastest
                                      of the list, the baseline-favourable choice); accuracy:
                                      blockattn.harness providers (reference = one baseline)
    metric                            speed: speedup | pct_of_copy_ceiling;
                                      accuracy: err_ratio_vs_reference | ratio_to_rounding_floor;
                                      oracle_time: seconds
    pass = fwd | bwd | fwdbwd         speed only
    tensors = ["dQ", ...]             accuracy: the quantity is the max over these tensors
    shape (a [shapes.X] table), D, dtype, variant = plain | rotary
    comparison = ">=" | "<=", threshold   the claim's own statement
    statistic = worst | median        which per-seed value decides (defaults by kind, below)
    definition                        precise prose of what is compared
"""

from __future__ import annotations

import statistics
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CLAIMS = REPO_ROOT / "claims" / "claims.toml"
KINDS = {
    "speed": ("speedup", "pct_of_copy_ceiling"),
    "accuracy": ("err_ratio_vs_reference", "ratio_to_rounding_floor"),
    "oracle_time": ("seconds",),
}
# Decision statistic per kind (overridable per claim):
# - accuracy: errors are deterministic per input, and "max error <= x" is a statement about
#   inputs in general, so it must hold on every seed (the worst seed decides);
# - speed / oracle_time: each seed's value is already a median of many timed calls; seeds only
#   redraw the lengths, so the median over seeds decides and min/max show the spread.
DEFAULT_STATISTIC = {"speed": "median", "accuracy": "worst", "oracle_time": "median"}
PASSES = ("fwd", "bwd", "fwdbwd")
VARIANTS = ("plain", "rotary")
DTYPES = ("bfloat16", "float16")
TENSORS = ("O", "dQ", "dK", "dV")
REQUIRED = (
    "id",
    "statement",
    "source",
    "kind",
    "metric",
    "shape",
    "D",
    "dtype",
    "comparison",
    "threshold",
    "definition",
)


class ClaimsError(ValueError):
    """Malformed claims file (CLI exit 2)."""


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    source: str
    kind: str
    metric: str
    shape: str
    D: int
    dtype: str
    comparison: str
    threshold: float
    definition: str
    provider: str = "blockattn"
    reference: tuple[str, ...] = ()
    made_for: str | None = None
    pass_: str | None = None
    tensors: tuple[str, ...] = ()
    variant: str = "plain"
    statistic: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def decide(self, values: list[float]) -> tuple[float, bool]:
        """(deciding value, claim holds) under this claim's statistic and comparison."""
        if self.statistic == "median":
            x = statistics.median(values)
        else:  # worst: the seed least favourable to the claim
            x = min(values) if self.comparison == ">=" else max(values)
        ok = x >= self.threshold if self.comparison == ">=" else x <= self.threshold
        return x, ok


def _err(i: int, cid: str, msg: str) -> ClaimsError:
    return ClaimsError(f"claims file: claim #{i} ({cid}): {msg}")


def load(path: str | Path) -> tuple[dict[str, dict[str, Any]], list[Claim]]:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"--claims: no claims file at {p}")
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ClaimsError(f"--claims: {p} is not valid TOML: {exc}") from exc
    if data.get("schema_version") != 1:
        raise ClaimsError(f"--claims: {p}: schema_version must be 1")
    shapes = data.get("shapes", {})
    for name, s in shapes.items():
        missing = {"B", "max_len", "sparsity", "H"} - set(s)
        if missing:
            raise ClaimsError(f"claims file: shape {name!r} lacks {sorted(missing)}")
    claims, seen = [], set()
    for i, c in enumerate(data.get("claim", [])):
        cid = c.get("id", "?")
        missing = [k for k in REQUIRED if k not in c]
        if missing:
            raise _err(i, cid, f"missing {missing}")
        if cid in seen:
            raise _err(i, cid, "duplicate id")
        seen.add(cid)
        kind, metric = c["kind"], c["metric"]
        if kind not in KINDS or metric not in KINDS[kind]:
            raise _err(i, cid, f"kind/metric must be one of {KINDS}, got {kind}/{metric}")
        if c["shape"] not in shapes:
            raise _err(i, cid, f"unknown shape {c['shape']!r} (known: {sorted(shapes)})")
        if c["comparison"] not in (">=", "<="):
            raise _err(i, cid, "comparison must be '>=' or '<='")
        if c["dtype"] not in DTYPES or c.get("variant", "plain") not in VARIANTS:
            raise _err(i, cid, f"dtype in {DTYPES}, variant in {VARIANTS}")
        ref = c.get("reference", [])
        ref = (ref,) if isinstance(ref, str) else tuple(ref)
        if metric in ("speedup", "err_ratio_vs_reference") and not ref:
            raise _err(i, cid, f"metric {metric} needs a reference")
        if kind == "speed" and c.get("pass") not in PASSES:
            raise _err(i, cid, f"speed claims need pass in {PASSES}")
        tensors = tuple(c.get("tensors", ()))
        if kind == "accuracy" and (not tensors or set(tensors) - set(TENSORS)):
            raise _err(i, cid, f"accuracy claims need tensors from {TENSORS}")
        stat = c.get("statistic", DEFAULT_STATISTIC[kind])
        if stat not in ("worst", "median"):
            raise _err(i, cid, "statistic must be worst or median")
        known = {
            *REQUIRED,
            "provider",
            "reference",
            "made_for",
            "pass",
            "tensors",
            "variant",
            "statistic",
        }
        claims.append(
            Claim(
                id=cid,
                statement=c["statement"],
                source=c["source"],
                kind=kind,
                metric=metric,
                shape=c["shape"],
                D=int(c["D"]),
                dtype=c["dtype"],
                comparison=c["comparison"],
                threshold=float(c["threshold"]),
                definition=c["definition"],
                provider=c.get("provider", "blockattn"),
                reference=ref,
                made_for=c.get("made_for"),
                pass_=c.get("pass"),
                tensors=tensors,
                variant=c.get("variant", "plain"),
                statistic=stat,
                extra={k: v for k, v in c.items() if k not in known},
            )
        )
    if not claims:
        raise ClaimsError(f"--claims: {p} has no [[claim]] entries")
    return shapes, claims
