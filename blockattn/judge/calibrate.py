"""Propose a tolerance file from run results (quantile x margin), with provenance and diffs.

Per (provider, dtype, tensor), over every ok case of the given report directories (base rule:
well-conditioned input distributions; .dist overrides: see propose_rules):
  max_ratio_to_floor    = max(MIN_RATIO_TO_FLOOR, sig2_up(margin * Q_p(err/floor)))
                          MIN_RATIO_TO_FLOOR = 2: two roundings is never a defect, and a bound
                          below it would gate on the oracle's own rounding model.
  max_ratio_to_baseline = max(1, sig2_up(margin * Q_p(err/baseline)))   (under-test only)
                          1: matching the baseline is always acceptable.
  min_snr_db            = floor(Q_(100-p)(SNR) - 20 log10(margin))
                          margin in amplitude is 20 log10(margin) dB of SNR.
  max_pct_over_tol      = min(100, max(MIN_PCT_OVER_TOL, margin * max pct))
Q_p = p-th percentile (nearest rank); with fewer than 1000/(100-p) samples it is the max.
SNR and pct samples come only from tensors whose error is above the absolute floor
(metrics.ATOL_FLOOR[dtype]): verdict.py skips those two relative rules there, so such samples
(e.g. dQ ~1e-9 under saturated softmax, SNR ~3 dB) would only loosen the bounds for everyone.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections import defaultdict
from typing import Any

from blockattn.judge.metrics import ATOL_FLOOR
from blockattn.judge.tolerances import REGRESSION_DEFAULTS, Tolerances

# Calibration proposes whole-tensor bounds: schema 1. Schema-2 files (elementwise, from
# blockattn/bounds/ERROR_ANALYSIS.md) are derived, not calibrated.
CALIBRATED_SCHEMA = 1

MIN_RATIO_TO_FLOOR = 2.0
MIN_PCT_OVER_TOL = 0.5
WELL_CONDITIONED = ("normal", "heavy_tailed", "negative_rows")
# scaled_logits: saturated softmax makes dS = P (dP - Di) cancel, so dQ/dK carry FP32 arithmetic
# noise far above their (small) output rounding: measured on CPU, fp16 rotary dK 10.7x the floor
# for blockattn and 10.8x for eager computed in FP32 (case rota-floa-bf15cb3f1b, v3 provenance).
ILL_CONDITIONED = ("near_constant", "tiny", "scaled_logits")


def sig2_up(x: float) -> float:
    """Round up to 2 significant digits (readable bounds that never round below the data)."""
    if x <= 0 or not math.isfinite(x):
        return float(x)
    e = math.floor(math.log10(x)) - 1
    return float(f"{math.ceil(x / 10**e - 1e-9) * 10**e:.2g}")


def _q(vals: list[float], p: float) -> float:
    s = sorted(vals)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


def _rule(s: dict[str, list[float]], margin: float, quantile: float) -> dict[str, float]:
    rule: dict[str, float] = {}
    if s["ratio"]:
        rule["max_ratio_to_floor"] = max(
            MIN_RATIO_TO_FLOOR, sig2_up(margin * _q(s["ratio"], quantile))
        )
    if s["vb"]:
        rule["max_ratio_to_baseline"] = max(1.0, sig2_up(margin * _q(s["vb"], quantile)))
    if s["snr"]:
        rule["min_snr_db"] = float(
            math.floor(_q(s["snr"], 100 - quantile) - 20 * math.log10(margin))
        )
    if s["pct"]:
        rule["max_pct_over_tol"] = min(
            100.0, max(MIN_PCT_OVER_TOL, sig2_up(margin * max(s["pct"])))
        )
    return rule


def _looser(key: str, new: float, old: float) -> bool:
    return new < old if key == "min_snr_db" else new > old


def propose_rules(
    records: list[dict[str, Any]], under_test: str, *, margin: float, quantile: float
) -> tuple[dict, dict[str, int]]:
    """Base rule per (provider, dtype, tensor) from well-conditioned input distributions, plus
    .dist.<name> overrides for ill-conditioned ones (only the fields where they need more room):
    near-uniform softmax (near_constant) and saturated softmax (scaled_logits) make dQ/dK a
    cancelling sum, and "tiny" inputs push fp16 gradients into subnormals, so one bound for all
    would be loose for every normal case."""
    samples: dict[tuple[str, str, str, str], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    counts: dict[str, int] = defaultdict(int)
    for r in records:
        dt, dist = r["spec"]["dtype"], r["spec"].get("distribution", "normal")
        counts[r["spec"].get("source", "adhoc")] += 1
        for name, p in r["providers"].items():
            if p["status"] != "ok":
                continue
            for t, m in p["tensors"].items():
                s = samples[(name, dt, t, dist)]
                if m["ratio_to_floor"] is None:
                    raise ValueError(
                        f"{r['case_id']}: {name} {t} has non-finite error; "
                        "refusing to calibrate on a broken run"
                    )
                s["ratio"].append(m["ratio_to_floor"])
                # verdict skips SNR and pct at or below the absolute floor: so does calibration
                relative = m.get("max_abs") is None or m["max_abs"] > ATOL_FLOOR.get(dt, 0.0)
                if relative and m.get("snr_db") is not None and m.get("ref_max_abs", 0) > 0:
                    s["snr"].append(m["snr_db"])
                if relative:
                    s["pct"].append(m.get("pct_over_tol", 0.0))
                if name == under_test and r.get("vs_baseline", {}).get(t) is not None:
                    s["vb"].append(r["vs_baseline"][t])
    keys = sorted({k[:3] for k in samples})
    rules: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for name, dt, t in keys:
        base_s: dict[str, list[float]] = defaultdict(list)
        for dist in WELL_CONDITIONED:
            for f, vals in samples.get((name, dt, t, dist), {}).items():
                base_s[f] += vals
        if not base_s["ratio"]:  # only ill-conditioned samples: they set the base
            for (n2, d2, t2, _), s in samples.items():
                if (n2, d2, t2) == (name, dt, t):
                    for f, vals in s.items():
                        base_s[f] += vals
        rule: dict[str, Any] = _rule(base_s, margin, quantile)
        overrides = {}
        for dist in ILL_CONDITIONED:
            s = samples.get((name, dt, t, dist))
            if not s:
                continue
            cand = _rule(s, margin, quantile)
            diff = {k: v for k, v in cand.items() if k in rule and _looser(k, v, rule[k])}
            if diff:
                overrides[dist] = diff
        if overrides:
            rule["dist"] = overrides
        rules.setdefault(name, {}).setdefault(dt, {})[t] = rule
    return rules, dict(counts)


def loosenings(new_rules: dict, old: Tolerances) -> list[str]:
    """Bounds that got looser than in the previous file (needs a stated reason)."""
    out = []
    for name, by_dt in new_rules.items():
        for dt, by_t in by_dt.items():
            for t, rule in by_t.items():
                for dist in (None, *rule.get("dist", {})):
                    prev = old.rule(name, dt, t, None, dist)
                    if prev is None:
                        continue
                    cur = {k: v for k, v in rule.items() if k not in ("arch", "dist")}
                    if dist is not None:
                        cur.update(rule["dist"][dist])
                    where = f"{name}.{dt}.{t}" + (f".dist.{dist}" if dist else "")
                    for k, v in cur.items():
                        pv = prev.get(k)
                        if pv is not None and _looser(k, v, pv):
                            out.append(f"{where}.{k}: {pv:g} -> {v:g}")
    return out


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def to_toml(doc: dict[str, Any], header: str = "") -> str:
    lines = [f"# {h}" for h in header.splitlines()] + ([""] if header else [])
    for k, v in doc.items():
        if not isinstance(v, dict):
            lines.append(f"{k} = {_toml_value(v)}")
    for k, v in doc.items():
        if isinstance(v, dict) and k != "rules":
            lines += ["", f"[{k}]"] + [f"{kk} = {_toml_value(vv)}" for kk, vv in v.items()]
    for name, by_dt in doc.get("rules", {}).items():
        for dt, by_t in by_dt.items():
            for t, rule in by_t.items():
                lines += ["", f"[rules.{name}.{dt}.{t}]"]
                lines += [
                    f"{kk} = {_toml_value(vv)}"
                    for kk, vv in rule.items()
                    if kk not in ("arch", "dist")
                ]
                for sub_kind in ("dist", "arch"):
                    for sub_name, sub in rule.get(sub_kind, {}).items():
                        lines += [f"[rules.{name}.{dt}.{t}.{sub_kind}.{sub_name}]"]
                        lines += [f"{kk} = {_toml_value(vv)}" for kk, vv in sub.items()]
    return "\n".join(lines) + "\n"


def build_document(
    records: list[dict[str, Any]],
    *,
    version: int,
    under_test: str,
    baseline: str,
    margin: float,
    quantile: float,
    generator: str,
    commit: str,
    device: str,
    gpu: str,
    loosening: list[str],
    status: str,
) -> dict[str, Any]:
    rules, counts = propose_rules(records, under_test, margin=margin, quantile=quantile)
    if under_test not in rules:
        raise ValueError(f"no ok results for the provider under test {under_test!r}")
    src = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    return {
        "schema_version": CALIBRATED_SCHEMA,
        "version": version,
        "status": status,
        "under_test": under_test,
        "baseline": baseline,
        "provenance": {
            "generator": generator,
            "commit": commit,
            "device": device,
            "gpu": gpu,
            "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d"),
            "method": (
                f"p{quantile:g} (nearest rank; = max below {math.ceil(100 / (100 - quantile))}"
                f" samples) over {len(records)} cases ({src}) x margin {margin:g}; "
                f"see blockattn/judge/calibrate.py for the formulas"
            ),
            "loosening": loosening,
        },
        "regression": dict(REGRESSION_DEFAULTS),
        "rules": rules,
    }
