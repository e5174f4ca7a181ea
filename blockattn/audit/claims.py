"""Claims file (claims/claims.toml): schema, validation and the decision rule of a verdict.

Each [[claim]] names the kernel it is about, what is measured and what the claim says:
    id, statement, source             identity and where the claim was made
    kernel                            required: the provider the claim is about, and the only
                                      one whose measurement decides it: a built-in ("blockattn",
                                      "tlx", "fa2", ...), an entry point, or an outside kernel
                                      given to `blockattn audit --provider NAME=MODULE:CALLABLE`;
                                      "oracle" for oracle_time claims. If that kernel cannot run
                                      here the claim is "not runnable here", never measured on
                                      another kernel (blockattn's standing is reported apart)
    made_for = "NVIDIA B200"          optional: hardware the claim was made for; on another GPU it
                                      is measured here and labelled "measured on <GPU>"
    kind = speed | accuracy | oracle_time
    reference                         speed: blockattn.bench providers (reference = the fastest
                                      of the list, the baseline-favourable choice); accuracy:
                                      blockattn.providers names (reference = one baseline)
    distribution = "normal"           accuracy: the input distribution the claim is about
                                      (default normal); the audit also reports the others
    rtol, atol                        accuracy, optional: the claim's own allclose tolerances for
                                      the FP32-reference measure (default: torch.testing's for
                                      the dtype)
    metric                            speed: speedup | pct_of_copy_ceiling;
                                      accuracy: err_ratio_vs_reference | ratio_to_rounding_floor;
                                      oracle_time: seconds
    pass = fwd | bwd | fwdbwd         speed only
    tensors = ["dQ", ...]             accuracy: the quantity is the max over these tensors
    shape (a [shapes.X] table), D, dtype, variant = plain | rotary
    comparison = ">=" | "<=", threshold   the claim's own statement
    statistic = worst | median        which per-seed value decides (defaults by kind, below)
    definition                        precise prose of what is compared
A claim never names `provider` (schema 1 did, meaning both the kernel and what ran it): the
timed callable is derived from `kernel` and `variant` (blockattn rotary -> blockattn_rotary).
"""

from __future__ import annotations

import statistics
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blockattn.names import DISTRIBUTIONS

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
SCHEMA_VERSION = 2
ORACLE = "oracle"  # the `kernel` of oracle_time claims: the FP64 oracle itself
REQUIRED = (
    "id",
    "statement",
    "source",
    "kernel",
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
    kernel: str = "blockattn"
    reference: tuple[str, ...] = ()
    made_for: str | None = None
    pass_: str | None = None
    tensors: tuple[str, ...] = ()
    variant: str = "plain"
    statistic: str = ""
    distribution: str = "normal"
    rtol: float | None = None
    atol: float | None = None
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
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ClaimsError(
            f"--claims: {p}: schema_version must be {SCHEMA_VERSION} (version 1 had no `kernel`: "
            "each claim now names the kernel it is about, see blockattn/audit/claims.py)"
        )
    shapes = data.get("shapes", {})
    for name, s in shapes.items():
        missing = {"B", "max_len", "sparsity", "H"} - set(s)
        if missing:
            raise ClaimsError(f"claims file: shape {name!r} lacks {sorted(missing)}")
        for k in ("B", "max_len", "H"):
            if not isinstance(s[k], int) or isinstance(s[k], bool) or s[k] < 1:
                raise ClaimsError(f"claims file: shape {name!r}: {k} must be an int >= 1")
    claims, seen = [], set()
    for i, c in enumerate(data.get("claim", [])):
        cid = c.get("id", "?")
        if "provider" in c:
            raise _err(
                i,
                cid,
                "`provider` is not a claim field: name the kernel the claim is "
                "about as `kernel` (the timed callable follows from kernel and variant)",
            )
        missing = [k for k in REQUIRED if k not in c]
        if missing:
            raise _err(i, cid, f"missing {missing}")
        if cid in seen:
            raise _err(i, cid, "duplicate id")
        seen.add(cid)
        kind, metric = c["kind"], c["metric"]
        kern = c["kernel"]
        if (
            not isinstance(kern, str)
            or not kern
            or not all(ch.isalnum() or ch in "_-." for ch in kern)
        ):
            raise _err(i, cid, f"kernel must be a provider name [A-Za-z0-9_.-], got {kern!r}")
        if (kind == "oracle_time") != (kern == ORACLE):
            raise _err(i, cid, f"kernel = {ORACLE!r} exactly for oracle_time claims, got {kern!r}")
        dist = c.get("distribution", "normal")
        if dist not in DISTRIBUTIONS:
            raise _err(i, cid, f"distribution must be one of {DISTRIBUTIONS}, got {dist!r}")
        tols = {k: c[k] for k in ("rtol", "atol") if k in c}
        for k, v in tols.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise _err(i, cid, f"{k} must be a number >= 0, got {v!r}")
        if len(tols) == 1:
            raise _err(i, cid, "give both rtol and atol, or neither")
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
            "distribution",
            "rtol",
            "atol",
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
                kernel=kern,
                reference=ref,
                made_for=c.get("made_for"),
                pass_=c.get("pass"),
                tensors=tensors,
                variant=c.get("variant", "plain"),
                statistic=stat,
                distribution=dist,
                rtol=tols.get("rtol"),
                atol=tols.get("atol"),
                extra={k: v for k, v in c.items() if k not in known},
            )
        )
    if not claims:
        raise ClaimsError(f"--claims: {p} has no [[claim]] entries")
    return shapes, claims
