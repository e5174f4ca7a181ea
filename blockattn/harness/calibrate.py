"""Propose a tolerance file from run results (quantile x margin), with provenance and diffs.

Per (provider, dtype, tensor), over every ok case of the given report directories:
  max_ratio_to_floor    = max(MIN_RATIO_TO_FLOOR, sig2_up(margin * Q_p(err/floor)))
                          MIN_RATIO_TO_FLOOR = 2: two roundings is never a defect, and a bound
                          below it would gate on the oracle's own rounding model.
  max_ratio_to_baseline = max(1, sig2_up(margin * Q_p(err/baseline)))   (under-test only)
                          1: matching the baseline is always acceptable.
  min_snr_db            = floor(Q_(100-p)(SNR) - 20 log10(margin))
                          margin in amplitude is 20 log10(margin) dB of SNR.
  max_pct_over_tol      = min(100, max(MIN_PCT_OVER_TOL, margin * max pct))
Q_p = p-th percentile (nearest rank); with fewer than 1000/(100-p) samples it is the max.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections import defaultdict
from typing import Any

from blockattn.harness.tolerances import REGRESSION_DEFAULTS, SCHEMA_VERSION, Tolerances

MIN_RATIO_TO_FLOOR = 2.0
MIN_PCT_OVER_TOL = 0.5


def sig2_up(x: float) -> float:
    """Round up to 2 significant digits (readable bounds that never round below the data)."""
    if x <= 0 or not math.isfinite(x):
        return x
    e = math.floor(math.log10(x)) - 1
    return math.ceil(x / 10**e - 1e-9) * 10**e


def _q(vals: list[float], p: float) -> float:
    s = sorted(vals)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


def propose_rules(
    records: list[dict[str, Any]], under_test: str, *, margin: float, quantile: float
) -> tuple[dict, dict[str, int]]:
    samples: dict[tuple[str, str, str], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    counts: dict[str, int] = defaultdict(int)
    for r in records:
        dt = r["spec"]["dtype"]
        counts[r["spec"].get("source", "adhoc")] += 1
        for name, p in r["providers"].items():
            if p["status"] != "ok":
                continue
            for t, m in p["tensors"].items():
                s = samples[(name, dt, t)]
                if m["ratio_to_floor"] is None:
                    raise ValueError(
                        f"{r['case_id']}: {name} {t} has non-finite error; "
                        "refusing to calibrate on a broken run"
                    )
                s["ratio"].append(m["ratio_to_floor"])
                if m.get("snr_db") is not None and m.get("ref_max_abs", 0) > 0:
                    s["snr"].append(m["snr_db"])
                s["pct"].append(m.get("pct_over_tol", 0.0))
                if name == under_test and r.get("vs_baseline", {}).get(t) is not None:
                    s["vb"].append(r["vs_baseline"][t])
    rules: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for (name, dt, t), s in sorted(samples.items()):
        rule: dict[str, float] = {
            "max_ratio_to_floor": max(
                MIN_RATIO_TO_FLOOR, sig2_up(margin * _q(s["ratio"], quantile))
            ),
        }
        if s["vb"]:
            rule["max_ratio_to_baseline"] = max(1.0, sig2_up(margin * _q(s["vb"], quantile)))
        if s["snr"]:
            rule["min_snr_db"] = float(
                math.floor(_q(s["snr"], 100 - quantile) - 20 * math.log10(margin))
            )
        rule["max_pct_over_tol"] = min(
            100.0, max(MIN_PCT_OVER_TOL, sig2_up(margin * max(s["pct"])))
        )
        rules.setdefault(name, {}).setdefault(dt, {})[t] = rule
    return rules, dict(counts)


def loosenings(new_rules: dict, old: Tolerances) -> list[str]:
    """Bounds that got looser than in the previous file (needs a stated reason)."""
    out = []
    for name, by_dt in new_rules.items():
        for dt, by_t in by_dt.items():
            for t, rule in by_t.items():
                prev = old.rule(name, dt, t, None)
                if prev is None:
                    continue
                for k, v in rule.items():
                    pv = prev.get(k)
                    if pv is None:
                        continue
                    looser = v < pv if k == "min_snr_db" else v > pv
                    if looser:
                        out.append(f"{name}.{dt}.{t}.{k}: {pv:g} -> {v:g}")
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
                lines += [f"{kk} = {_toml_value(vv)}" for kk, vv in rule.items() if kk != "arch"]
                for arch, sub in rule.get("arch", {}).items():
                    lines += [f"[rules.{name}.{dt}.{t}.arch.{arch}]"]
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
        "schema_version": SCHEMA_VERSION,
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
                f"see blockattn/harness/calibrate.py for the formulas"
            ),
            "loosening": loosening,
        },
        "regression": dict(REGRESSION_DEFAULTS),
        "rules": rules,
    }
