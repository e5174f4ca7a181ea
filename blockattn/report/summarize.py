"""Aggregate results.jsonl records into tables (used by run, gate and report).

Public: status_counts, tensor_table, markdown_tables, verdict_markdown, elementwise_markdown
(gate / run CI comments), and the helpers report.py shares (loc_summary, violating_cases, ...).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from blockattn.judge.verdict import Verdict
from blockattn.report.escape import md_inline, safe_contract_markdown


def _q(vals: list[float], p: float) -> float:
    s = sorted(vals)
    if not s:
        return math.nan
    i = min(len(s) - 1, max(0, math.ceil(p / 100.0 * len(s)) - 1))
    return s[i]


def status_counts(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in records:
        if r.get("oracle_error"):
            out["oracle"]["error"] += 1
        for name, p in r["providers"].items():
            out[name][p["status"]] += 1
    return {k: dict(v) for k, v in out.items()}


def _tensor_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """tensor_table's rows with math.inf for unbounded values (for formatting)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        s = r["spec"]
        for name, p in r["providers"].items():
            if p["status"] != "ok":
                continue
            for t, m in p["tensors"].items():
                groups[(name, s["variant"], s["dtype"], t)].append(
                    {
                        **m,
                        "_vb": (
                            r.get("vs_baseline", {}).get(t) if name == r["under_test"] else None
                        ),
                    }
                )
    rows = []
    for (name, var, dt, t), ms in sorted(groups.items()):
        ratios = [m["ratio_to_floor"] if m["ratio_to_floor"] is not None else math.inf for m in ms]
        snrs = [m["snr_db"] for m in ms if m["snr_db"] is not None]
        vbs = [m["_vb"] for m in ms if m["_vb"] is not None]
        rows.append(
            {
                "provider": name,
                "variant": var,
                "dtype": dt,
                "tensor": t,
                "n": len(ms),
                "max_ratio_to_floor": max(ratios),
                "p50_ratio_to_floor": _q(ratios, 50),
                "max_abs": max(
                    (m["max_abs"] if m["max_abs"] is not None else math.inf) for m in ms
                ),
                "min_snr_db": min(snrs) if snrs else None,
                "max_vs_baseline": max(vbs) if vbs else None,
                "nonfinite_bad": sum(m["nonfinite_bad"] for m in ms),
                **elementwise_summary(ms),
            }
        )
    return rows


def tensor_table(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows per (provider, variant, dtype, tensor): n, worst/median ratio_to_floor, min SNR,
    and the elementwise columns of `elementwise_summary` (None-valued when no case has them).

    JSON-safe (report.json): an unbounded value is None, the records' own convention.
    """
    return [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        for row in _tensor_rows(records)
    ]


def _f(x: Any, fmt: str = ".3g") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, fmt) if isinstance(x, float) else str(x)


def markdown_tables(records: list[dict[str, Any]]) -> str:
    """Status counts and the per provider x variant x dtype x tensor error table; the
    elementwise columns (ulp, bound headroom) are appended when any record carries them."""
    ew = has_elementwise(records)
    lines = ["| provider | status counts |", "|---|---|"]
    for name, c in sorted(status_counts(records).items()):
        lines.append(f"| {name} | " + ", ".join(f"{k}: {v}" for k, v in sorted(c.items())) + " |")
    lines += [
        "",
        "| provider | variant | dtype | tensor | n | max err/floor | p50 err/floor | "
        "max abs err | min SNR dB | max err/baseline | NaN/Inf |"
        + (f" {ULP_HEADER} |" if ew else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" * 7 if ew else ""),
    ]
    for row in _tensor_rows(records):
        lines.append(
            f"| {row['provider']} | {row['variant']} | {row['dtype']} | {row['tensor']} | "
            f"{row['n']} | {_f(row['max_ratio_to_floor'])} | {_f(row['p50_ratio_to_floor'])} | "
            f"{_f(row['max_abs'])} | {_f(row['min_snr_db'], '.1f')} | "
            f"{_f(row['max_vs_baseline'])} | {row['nonfinite_bad']} |"
            + ("".join(f" {c} |" for c in _ulp_cols(row)) if ew else "")
        )
    return "\n".join(lines)


def verdict_markdown(
    verdicts: list[Verdict], records: list[dict[str, Any]], max_list: int = 20
) -> str:
    by_id = {r["case_id"]: r for r in records}
    failed = [v for v in verdicts if not v.passed]
    skipped = [v for v in verdicts if v.skipped and v.passed]
    lines = [
        f"Cases: {len(verdicts)} · passed {len(verdicts) - len(failed) - len(skipped)} · "
        f"failed {len(failed)} · skipped (declared unsupported) {len(skipped)}"
    ]
    if failed:
        lines += ["", "### Failures", ""]
        for v in failed[:max_list]:
            r = by_id.get(v.case_id, {})
            name = r.get("spec", {}).get("name") or ""
            lines.append(f"- `{v.case_id}` {md_inline(name)}: "
                         + "; ".join(md_inline(f) for f in v.failures[:3]))  # fmt: skip
            replay = (r.get("verdict") or {}).get("replay")
            if replay:
                lines.append(f"  - replay: `{replay}`")
        if len(failed) > max_list:
            lines.append(f"- ... and {len(failed) - max_list} more")
    warns = [(v.case_id, w) for v in verdicts for w in v.warnings]
    if warns:
        lines += ["", f"<details><summary>{len(warns)} warnings</summary>", ""]
        lines += [f"- `{cid}`: {md_inline(w)}" for cid, w in warns[:max_list]]
        lines += ["", "</details>"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Elementwise fields (blockattn/bounds/RECORD.md): tensor["ulp"] and tensor["bound"].
# Records written before those keys existed render with "-" in every elementwise column.
# Convention of the records, kept here: a None *value* inside ulp/bound means +inf (JSON has no
# inf); a missing key, or bound = None, means "not measured" / "no accuracy model".


def has_elementwise(records: list[dict[str, Any]]) -> bool:
    """True when any ok provider tensor of `records` carries `ulp` or a non-None `bound`."""
    return any(
        "ulp" in m or m.get("bound") is not None
        for r in records
        for p in r.get("providers", {}).values()
        if p.get("status") == "ok"
        for m in (p.get("tensors") or {}).values()
    )


def _inf(x: Any) -> float:
    return math.inf if x is None else float(x)


def _weight(m: dict[str, Any]) -> float:
    """Finite-oracle element count: the denominator of the record's percentages."""
    n = m.get("numel")
    if n is None:
        return 1.0
    return float(max(0, n - (m.get("ref_nonfinite") or 0)))


def _wmean(pairs: list[tuple[float, float]]) -> float | None:
    pairs = [(x, w) for x, w in pairs if x is not None]
    if not pairs:
        return None
    tw = sum(w for _, w in pairs)
    if tw <= 0:
        return sum(x for x, _ in pairs) / len(pairs)
    return sum(x * w for x, w in pairs) / tw


def bound_violated(m: dict[str, Any]) -> bool:
    """True when a tensor's record has a bound and an element exceeds it (max_ratio > 1)."""
    b = m.get("bound")
    if not b:
        return False
    if b.get("violations"):
        return True
    if b.get("max_ratio") is None:  # None = inf; an empty tensor has nothing to violate
        return m.get("numel", 1) > 0
    return b["max_ratio"] > 1.0


def elementwise_summary(ms: list[dict[str, Any]]) -> dict[str, Any]:
    """Elementwise columns of one group of tensor metrics (one provider x tensor, many cases).

    Percentages are weighted by each case's finite-oracle element count. p99.99 is the largest
    per-case p99.99: an upper bound of the pooled quantile (every case has <= 0.01 % of its
    elements above it, so the pool does too). Values are floats with inf for "unbounded"; None
    for "no case of the group has the field" (n_ulp / n_bounded say how many do).
    """
    us = [(m["ulp"], _weight(m)) for m in ms if m.get("ulp")]
    bs = [(m["bound"], _weight(m), m) for m in ms if m.get("bound")]
    out: dict[str, Any] = {
        "n_ulp": len(us),
        "pct_correctly_rounded": _wmean([(u.get("pct_correctly_rounded"), w) for u, w in us]),
        "pct_faithful": _wmean([(u.get("pct_faithful"), w) for u, w in us]),
        "p99_99_ulp": None,
        "max_ulp": None,
        "max_ulp_not_tiny": None,
        "n_bounded": len(bs),
        "violations": None,
        "pct_violations": None,
        "max_bound_ratio": None,
        "min_growth": None,
        "bound_models": sorted(
            {f"{b.get('model', '?')} c={_f(b.get('c'), 'g')}" for b, _, _ in bs}
        ),
        "n_violating": sum(bound_violated(m) for _, _, m in bs),
    }
    qs = [u.get("quantiles") or {} for u, _ in us]
    if any("p99.99" in q for q in qs):
        out["p99_99_ulp"] = max(_inf(q.get("p99.99")) for q in qs if "p99.99" in q)
    if any("max" in q for q in qs):
        out["max_ulp"] = max(_inf(q.get("max")) for q in qs if "max" in q)
    nts = [u["not_tiny"] for u, _ in us if u.get("not_tiny")]
    if nts:
        out["max_ulp_not_tiny"] = max(_inf(nt.get("max")) for nt in nts)
    gs = [b["growth"] for b, _, _ in bs if "growth" in b]
    if gs:  # None: every element exact in that case
        out["min_growth"] = min((g for g in gs if g is not None), default=math.inf)
    if bs:
        out["violations"] = sum(int(b.get("violations") or 0) for b, _, _ in bs)
        out["pct_violations"] = _wmean([(b.get("pct_violations"), w) for b, w, _ in bs])
        out["max_bound_ratio"] = max(
            _inf(b.get("max_ratio")) if m.get("numel", 1) > 0 else 0.0 for b, _, m in bs
        )
    return out


def _pct(x: float | None) -> str:
    """A percentage that never rounds a miss to 100 or a hit to 0."""
    if x is None:
        return "-"
    s = f"{x:.2f}"
    if s == "100.00" and x < 100.0:
        return ">99.99"
    if s == "0.00" and x > 0.0:
        return f"{x:.2g}"
    return "100" if x >= 100.0 else s


def _viol(row: dict[str, Any]) -> str:
    if not row.get("n_bounded"):
        return "-"
    return f"{row['violations']} ({_f(row['pct_violations'], '.3g')}%)"


def _headroom(row: dict[str, Any]) -> str:
    """min over elements of bound / error: the factor by which the worst element's stored error
    could grow before it violates ("-" for records written before `growth` existed)."""
    if not row.get("n_bounded"):
        return "-"
    if row.get("n_violating") or row["max_bound_ratio"] > 1.0:
        return "VIOLATED"
    g = row.get("min_growth")
    if g is None:
        return "-"
    return "exact" if math.isinf(g) else f"{g:.3g}x"


def _ulp_cols(row: dict[str, Any]) -> list[str]:
    return [
        _pct(row.get("pct_correctly_rounded")),
        _pct(row.get("pct_faithful")),
        _f(row.get("p99_99_ulp")),
        _f(row.get("max_ulp")),
        _f(row.get("max_ulp_not_tiny")),
        _viol(row),
        _headroom(row),
    ]


ULP_HEADER = ("% correctly rounded | % faithful | p99.99 ulp | max ulp | max ulp, not tiny | "
              "violations | headroom")


def _loc_ranges(idx: list[int], n: int, max_parts: int = 4) -> str:
    """[0,1,2,5] of 8 -> '0-2, 5'; every index -> 'all'; all odd/even indices -> 'odd'/'even'."""
    if not idx:
        return "none"
    if len(idx) == n:
        return "all"
    if len(idx) >= 3 and len(idx) >= n // 4:
        for par, word in ((1, "odd"), (0, "even")):
            if all(i % 2 == par for i in idx):
                return f"{word} only ({len(idx)} of {n})"
    parts: list[str] = []
    start = prev = idx[0]
    for i in [*idx[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    more = len(parts) - max_parts
    return ", ".join(parts[:max_parts]) + (f", ... (+{more})" if more > 0 else "")


def loc_summary(loc: dict[str, Any] | None) -> str:
    """One line naming where the e/bound > 1 elements sit: heads, rows in block, dims, blocks.

    A masking bug reads as a row band, a stride/head bug as one head, a rotary-pair bug as
    'dims odd only'.
    """
    if not loc:
        return "-"
    parts = []
    rd = loc.get("row_dim") or []
    if rd and rd[0]:
        rows = [i for i, row in enumerate(rd) if any(_inf(x) > 1.0 for x in row)]
        dims = [j for j in range(len(rd[0])) if any(_inf(row[j]) > 1.0 for row in rd)]
        parts.append(f"rows {_loc_ranges(rows, len(rd))}")
        parts.append(f"dims {_loc_ranges(dims, len(rd[0]))}")
    bh = loc.get("by_head") or []
    if bh:
        parts.insert(
            0, f"heads {_loc_ranges([i for i, x in enumerate(bh) if _inf(x) > 1], len(bh))}"
        )
    bb = loc.get("by_block") or []
    if bb:
        k = max(1, int(loc.get("block_bucket") or 1))
        hit = [i for i, x in enumerate(bb) if _inf(x) > 1.0]
        s = _loc_ranges(hit, len(bb))
        parts.append(
            f"blocks {s}" if k == 1 else f"block buckets {s} (of {len(bb)}, {k} blocks each)"
        )
    return "; ".join(parts) if parts else "-"


WORST_KEYS = ("seq", "block", "row", "token", "head", "dim", "col", "index")


def worst_where(w: dict[str, Any] | None) -> str:
    if not w:
        return "-"
    return " ".join(f"{k}={w[k]}" for k in WORST_KEYS if k in w)


def _ew_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        s = r.get("spec", {})
        for name, p in r.get("providers", {}).items():
            if p.get("status") != "ok":
                continue
            for t, m in (p.get("tensors") or {}).items():
                groups[(name, s.get("variant"), s.get("dtype"), t)].append(m)
    rows = []
    for (name, var, dt, t), ms in groups.items():
        rows.append(
            {"provider": name, "variant": var, "dtype": dt, "tensor": t, "n": len(ms)}
            | elementwise_summary(ms)
        )
    return rows


def _fails(row: dict[str, Any]) -> bool:
    return bool(row.get("n_bounded")) and (
        bool(row.get("n_violating")) or row["max_bound_ratio"] > 1.0
    )


def violating_cases(
    records: list[dict[str, Any]], *, under_test: str | None = None
) -> list[dict[str, Any]]:
    """(case, provider, tensor) entries whose bound is violated: the provider under test
    (default: each record's `under_test`) first, then worst (max e/bound) first."""
    out = []
    for r in records:
        for name, p in r.get("providers", {}).items():
            if p.get("status") != "ok":
                continue
            for t, m in (p.get("tensors") or {}).items():
                if bound_violated(m):
                    b = m["bound"]
                    out.append(
                        {
                            "case_id": r.get("case_id"),
                            "name": r.get("spec", {}).get("name") or "",
                            "variant": r.get("spec", {}).get("variant"),
                            "dtype": r.get("spec", {}).get("dtype"),
                            "provider": name,
                            "under_test": name == (under_test or r.get("under_test")),
                            "tensor": t,
                            "violations": int(b.get("violations") or 0),
                            "pct_violations": b.get("pct_violations"),
                            "max_ratio": _inf(b.get("max_ratio")),
                            "worst": b.get("worst"),
                            "loc": b.get("loc"),
                            "record": r,
                            "metrics": m,
                        }
                    )
    out.sort(key=lambda v: (not v["under_test"], -v["max_ratio"], -v["violations"]))
    return out


def elementwise_markdown(
    records: list[dict[str, Any]], *, max_list: int = 20, under_test: str | None = None
) -> str:
    """Markdown for a CI comment: elementwise accuracy per provider x variant x dtype x tensor,
    aggregated over cases. Rows that violate their bound come first (the provider under test's,
    then worst first), then the provider under test's (default: each record's `under_test`);
    the other providers' clean rows are folded into a <details> block. Then the worst
    violating cases (at most `max_list`) and where their damage sits.

    Returns "" when no record carries the elementwise fields (runs older than RECORD.md).
    """
    if not has_elementwise(records):
        return ""
    uts = {under_test} if under_test else {r.get("under_test") for r in records}
    rows = _ew_rows(records)
    rows.sort(
        key=lambda row: (
            not _fails(row),
            row["provider"] not in uts,
            -row["max_bound_ratio"] if _fails(row) else 0.0,
            str(row["provider"]),
            str(row["variant"]),
            str(row["dtype"]),
            str(row["tensor"]),
        )
    )
    shown = [row for row in rows if _fails(row) or row["provider"] in uts]
    folded = [row for row in rows if not (_fails(row) or row["provider"] in uts)]
    n_fail = sum(map(_fails, rows))
    head = [
        f"| provider | variant | dtype | tensor | cases | {ULP_HEADER} | bound model |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def line(row: dict[str, Any]) -> str:
        model = ", ".join(row["bound_models"]) or "-"
        if row["n_bounded"] and row["n_bounded"] < row["n"]:
            model += f" ({row['n_bounded']}/{row['n']} cases)"
        return (
            f"| {row['provider']} | {row['variant']} | {row['dtype']} | {row['tensor']} | "
            f"{row['n']} | " + " | ".join(_ulp_cols(row)) + f" | {model} |"
        )

    lines = [
        f"### Elementwise accuracy: {n_fail} provider x tensor group(s) violate their bound",
        "",
        "ulp = error in units in the last place of the exact value in the case dtype; "
        "p99.99 / max = worst case of the group (an element whose exact value is near 0 has a "
        "tiny ulp, so its ulp count can be huge while it is well within its bound: judge by the "
        "bound columns). max ulp, not tiny = the same over the elements whose exact value is at "
        "least 2^-10 of the tensor's largest (below that an ulp count measures cancellation, not "
        "the kernel). violations = elements beyond the model's bound. headroom = min over "
        "elements of bound / error: the factor by which the worst element's stored error could "
        "grow before it violates (exact: no element has an error). VIOLATED: a violation.",
    ]
    if shown:
        lines += ["", *head, *map(line, shown)]
    if folded:
        names = sorted({str(row["provider"]) for row in folded})
        lines += [
            "",
            f"<details><summary>{len(folded)} more rows, within their bounds: "
            f"{', '.join(names)}</summary>",
            "",
            *head,
            *map(line, folded),
            "",
            "</details>",
        ]
    bad = violating_cases(records, under_test=under_test)
    if bad:
        lines += [
            "",
            f"#### Bound violations: {len(bad)} case x provider x tensor (worst first)",
            "",
            "| case | provider | tensor | violations | max err/bound | worst element | where |",
            "|---|---|---|---|---|---|---|",
        ]
        for v in bad[:max_list]:
            case = f"`{v['case_id']}`" + (f" {v['name']}" if v["name"] else "")
            lines.append(
                f"| {case} | {v['provider']} | {v['tensor']} | {v['violations']} "
                f"({_f(v['pct_violations'], '.3g')}%) | {_f(v['max_ratio'])} | "
                f"{worst_where(v['worst'])} | {loc_summary(v['loc'])} |"
            )
        if len(bad) > max_list:
            lines += ["", f"... and {len(bad) - max_list} more"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The report's headline (blockattn report): verdict counts and per provider x tensor bound rows.

DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64"}


def dtype_short(dtype: Any) -> str:
    """'bfloat16' -> 'bf16' (a deliberate abbreviation, never a truncation); others unchanged."""
    return DTYPE_SHORT.get(str(dtype), str(dtype))


def errored(record: dict[str, Any]) -> bool:
    """The oracle failed, or the provider under test errored (no verdict on its numbers)."""
    if record.get("oracle_error"):
        return True
    p = record.get("providers", {}).get(record.get("under_test"))
    return bool(p) and p.get("status") == "error"


def verdict_counts(records: list[dict[str, Any]]) -> dict[str, int]:
    """Case counts from each record's `verdict` (never from provider status).

    cases = judged + not_judged; judged = passed + failed + skipped + errored_judged, where an
    errored case (oracle or provider under test errored) counts as errored, not failed.
    `errored` also counts unjudged records, so a --no-tolerances run still shows its errors.
    """
    c = dict.fromkeys(
        ("cases", "judged", "passed", "failed", "skipped", "errored", "not_judged"), 0
    )
    for r in records:
        c["cases"] += 1
        v = r.get("verdict")
        if errored(r):
            c["errored"] += 1
        if not isinstance(v, dict) or "passed" not in v:
            c["not_judged"] += 1
            continue
        c["judged"] += 1
        if errored(r):
            continue
        if not v["passed"]:
            c["failed"] += 1
        elif v.get("skipped"):
            c["skipped"] += 1
        else:
            c["passed"] += 1
    return c


def bound_rows(
    records: list[dict[str, Any]], *, under_test: str | None = None
) -> list[dict[str, Any]]:
    """tensor_table's rows (inf for unbounded), each with `failing` (bound violated or NaN/Inf
    where the oracle is finite), `under_test`, and the `headroom` / `violations_text` cells of
    elementwise_markdown; failing rows first (the provider under test's, worst first), then the
    provider under test's, then the rest."""
    uts = {under_test} if under_test else {r.get("under_test") for r in records}
    rows = []
    for row in _tensor_rows(records):
        row["failing"] = _fails(row) or row["nonfinite_bad"] > 0
        row["under_test"] = row["provider"] in uts
        row["headroom"] = _headroom(row)
        row["violations_text"] = _viol(row)
        rows.append(row)
    rows.sort(
        key=lambda row: (
            not row["failing"],
            not row["under_test"],
            -(row["max_bound_ratio"] or 0.0) if row["failing"] else 0.0,
            str(row["provider"]),
            str(row["variant"]),
            str(row["dtype"]),
            str(row["tensor"]),
        )
    )
    return rows


# ---------------------------------------------------------------------------------------------
# summary.md of a run: headline, UNRELEASED, legend


def unreleased_line(tol: Any) -> str | None:
    """The warning every output of a run judged by an unreleased tolerance file carries."""
    if tol is None or tol.released_as is not None:
        return None
    return (f"> ⚠️ UNRELEASED tolerance file `{tol.path}` (sha256 {tol.sha256}): its verdicts "
            "are vouched for by nobody but whoever wrote it")  # fmt: skip


LEGEND = """<details><summary>What the columns mean</summary>

Every error is measured against the FP64 oracle on the same inputs, per case, then aggregated
over the cases of a row (provider x variant x dtype x tensor).

- **n**: cases in the row. **status counts**: did each provider run (ok, unsupported, error);
  not the verdict.
- **max err/floor**: max |err| divided by the rounding floor, the error of rounding the exact
  result to the output dtype. 1.00 is as good as the dtype allows. **p50 err/floor**: the median
  over the cases.
- **max abs err**: the largest absolute error. **min SNR dB**: the lowest signal-to-noise ratio
  (higher is better).
- **max err/baseline**: the error over the baseline provider's on the same case (below 1: more
  accurate than the baseline; "-" for the baseline itself).
- **NaN/Inf**: non-finite elements where the oracle is finite (should be 0).
- **% correctly rounded / % faithful**: elements within 0.5 / 1 ulp (unit in the last place of
  the output dtype at that element) of the oracle.
- **p99.99 ulp / max ulp**: the error in ulps. **max ulp** can read 1e12 on a correct kernel: an
  element whose exact value is tiny (a cancellation near 0) has a tiny ulp, so a small absolute
  error is many of them; **max ulp, not tiny** leaves those elements out.
- **violations**: elements above the bound of the kernel's accuracy model (should be 0).
- **headroom**: the smallest bound / error over the elements, the factor by which the worst
  element's error could grow before it violates. **1x** is within the bound, exactly at it: the
  usual reading where the bound is the dtype's own rounding, which a correctly rounded element
  meets with equality. **exact**: no error at all. **VIOLATED**: some element exceeds it.

</details>"""


def run_summary_markdown(
    *,
    info: dict[str, Any],
    commit: str,
    tol: Any,
    under_test: str,
    verdicts: list[Verdict],
    records: list[dict[str, Any]],
    contract_md: str,
    contract_bad: list[str],
    checks: list[dict[str, Any]] | None,
    contract: list[dict[str, Any]] | None = None,
) -> str:
    """summary.md of `blockattn run`: a PASS / FAIL / NOT JUDGED headline first (with the
    UNRELEASED warning where it applies), the verdicts, the contract, the tables and a legend
    of their columns."""
    judged = [v for v in verdicts if not v.skipped]
    failed = [v for v in verdicts if not v.passed]
    bad_checks = [c for c in checks or [] if not c.get("passed", True)]
    why: list[str] = []
    if failed:
        why.append(f"{len(failed)} of {len(judged)} judged case(s) failed")
    if contract_bad:
        why.append(f"{len(contract_bad)} contract violation(s)")
    if bad_checks:
        why.append(f"{len(bad_checks)} oracle self-check(s) failed")
    if tol is not None and not judged:
        why.append(f"zero cases judged for {under_test!r} (none supported here)")
    if tol is None:
        word = "NOT JUDGED"
        why.append("--no-tolerances: metrics only, no verdict")
    else:
        word = "❌ FAIL" if why else "✅ PASS"
    unrel = unreleased_line(tol)
    head = f"# blockattn run: {word}" + (" (UNRELEASED tolerances)" if unrel else "")
    md = [
        head,
        "",
        f"{info['device']} ({info['gpu']}), commit {commit} · under test `{under_test}` · "
        + (f"tolerances {tol.label}" if tol is not None else "no tolerance file")
        + (f" · {'; '.join(why)}" if why else f" · {len(judged)} judged case(s) passed"),
        "",
    ]
    if unrel:
        md += [unrel, ""]
    if tol is not None:
        md += [verdict_markdown(verdicts, records), ""]
    md += [safe_contract_markdown(contract, contract_md, under_test), "",
           markdown_tables(records), "", LEGEND]  # fmt: skip
    if checks is not None:
        md += ["", "## Oracle self-check", "", "| check | value | bound | passed |",
               "|---|---|---|---|"]  # fmt: skip
        md += [f"| {c['name']} | {c['value']} | {c['bound']} | {c['passed']} |" for c in checks]
    return "\n".join(md) + "\n"
