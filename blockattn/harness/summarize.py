"""Aggregate results.jsonl records into tables (used by run, gate and report)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from blockattn.harness.verdict import Verdict


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


def tensor_table(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows per (provider, variant, dtype, tensor): n, worst/median ratio_to_floor, min SNR."""
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
            }
        )
    return rows


def _f(x: Any, fmt: str = ".3g") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, fmt) if isinstance(x, float) else str(x)


def markdown_tables(records: list[dict[str, Any]]) -> str:
    lines = ["| provider | status counts |", "|---|---|"]
    for name, c in sorted(status_counts(records).items()):
        lines.append(f"| {name} | " + ", ".join(f"{k}: {v}" for k, v in sorted(c.items())) + " |")
    lines += [
        "",
        "| provider | variant | dtype | tensor | n | max err/floor | p50 err/floor | "
        "max abs err | min SNR dB | max err/baseline | NaN/Inf |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in tensor_table(records):
        lines.append(
            f"| {row['provider']} | {row['variant']} | {row['dtype']} | {row['tensor']} | "
            f"{row['n']} | {_f(row['max_ratio_to_floor'])} | {_f(row['p50_ratio_to_floor'])} | "
            f"{_f(row['max_abs'])} | {_f(row['min_snr_db'], '.1f')} | "
            f"{_f(row['max_vs_baseline'])} | {row['nonfinite_bad']} |"
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
        f"failed {len(failed)} · skipped (unsupported fuzz) {len(skipped)}"
    ]
    if failed:
        lines += ["", "### Failures", ""]
        for v in failed[:max_list]:
            r = by_id.get(v.case_id, {})
            name = r.get("spec", {}).get("name") or ""
            lines.append(f"- `{v.case_id}` {name}: " + "; ".join(v.failures[:3]))
            replay = (r.get("verdict") or {}).get("replay")
            if replay:
                lines.append(f"  - replay: `{replay}`")
        if len(failed) > max_list:
            lines.append(f"- ... and {len(failed) - max_list} more")
    warns = [(v.case_id, w) for v in verdicts for w in v.warnings]
    if warns:
        lines += ["", f"<details><summary>{len(warns)} warnings</summary>", ""]
        lines += [f"- `{cid}`: {w}" for cid, w in warns[:max_list]]
        lines += ["", "</details>"]
    return "\n".join(lines)
