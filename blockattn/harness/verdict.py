"""Acceptance rules: one results.jsonl record + a tolerance file -> pass/fail with reasons.

Per tensor of the provider under test (rule = tolerances[provider][dtype][tensor], overridden
by .dist[input distribution] then .arch[GPU arch]):
  1. nonfinite_bad == 0                  NaN/Inf where the FP64 oracle is finite is never rounding.
  2. max_abs / F <= max_ratio_to_floor   F = max(floor_eff, rule.atol_floor): error measured in
                                         "perfect single roundings"; F > 0 always (see metrics).
  3. max_abs / max(base_max_abs, F) <= max_ratio_to_baseline
                                         only vs the baseline the file was calibrated against;
                                         F guards a zero-error baseline from forcing a zero bound.
  4. snr_db >= min_snr_db                skipped when the oracle is all zero (SNR undefined).
  5. pct_over_tol <= max_pct_over_tol    elementwise N-ulp band (metrics.N_ULP).
     4 and 5 are relative measures: they are skipped when max_abs <= A, the absolute floor
     (max(rule.atol_floor, metrics.ATOL_FLOOR[dtype])). Errors below A are declared harmless
     by the file; a tensor whose oracle itself is below A (e.g. dQ ~1e-9 under saturated
     softmax) would otherwise fail SNR on noise far under any rounding of the output.
Status rules: under-test "error" fails; "unsupported" fails for corpus cases (the corpus only
holds supported configurations) and is skipped for fuzz cases; an oracle error fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from blockattn.harness import metrics
from blockattn.harness.tolerances import Tolerances


@dataclass
class Verdict:
    case_id: str
    passed: bool = True
    skipped: bool = False
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # (provider, dtype, tensor) -> {"ratio_to_floor": x, "bound": y, ...} for summaries
    checks: list[dict[str, Any]] = field(default_factory=list)

    def fail(self, msg: str) -> None:
        self.passed = False
        self.failures.append(msg)


def _check_tensor(
    v: Verdict,
    who: str,
    m: dict,
    base_m: dict | None,
    rule: dict,
    gated_baseline: bool,
    tensor: str,
    dtype: str,
    variant: str,
    hard: bool,
) -> None:
    def bad(msg: str) -> None:
        if hard:
            v.fail(f"{who} {tensor}: {msg}")
        else:
            v.warnings.append(f"{who} {tensor}: {msg}")

    if m.get("nonfinite_bad", 0):
        bad(f"{m['nonfinite_bad']} NaN/Inf where the oracle is finite")
    F = max(m["floor_eff"], rule.get("atol_floor", 0.0))
    max_abs = m["max_abs"]
    r_floor = None if max_abs is None else max_abs / F
    bound = rule["max_ratio_to_floor"]
    if r_floor is None or r_floor > bound:
        w = m.get("worst") or {}
        where = ",".join(
            f"{k}={w[k]}" for k in ("token", "head", "dim", "row", "col", "index") if k in w
        )
        bad(
            f"max_abs/floor = {_fmt(r_floor)} > {bound:g} (max_abs {_fmt(max_abs)}, "
            f"floor {F:.3g}, worst [{where}] got {w.get('value')} want {w.get('oracle')})"
        )
    r_base = None
    if "max_ratio_to_baseline" in rule and gated_baseline and base_m is not None:
        bmax = base_m["max_abs"]
        r_base = None if max_abs is None else max_abs / max(bmax if bmax is not None else 0.0, F)
        if bmax is None:
            v.warnings.append(f"{who} {tensor}: baseline output non-finite; ratio not gated")
        elif r_base is None or r_base > rule["max_ratio_to_baseline"]:
            bad(f"error/baseline = {_fmt(r_base)} > {rule['max_ratio_to_baseline']:g}")
    below_atol = max_abs is not None and max_abs <= max(
        rule.get("atol_floor", 0.0), metrics.ATOL_FLOOR[dtype]
    )
    if below_atol:
        pass  # rules 4 and 5 skipped: see the module docstring
    elif "min_snr_db" in rule and m.get("ref_max_abs", 0.0) > 0 and not m.get("snr_inf"):
        snr = m.get("snr_db")
        if snr is None or snr < rule["min_snr_db"]:
            bad(f"SNR {_fmt(snr)} dB < {rule['min_snr_db']:g} dB")
    if (
        not below_atol
        and "max_pct_over_tol" in rule
        and m.get("pct_over_tol", 0.0) > rule["max_pct_over_tol"]
    ):
        bad(
            f"{m['pct_over_tol']:.3g}% elements over the {m.get('over_tol')}-element "
            f"N-ulp band > {rule['max_pct_over_tol']:g}%"
        )
    v.checks.append(
        {
            "provider": who,
            "variant": variant,
            "dtype": dtype,
            "tensor": tensor,
            "ratio_to_floor": r_floor,
            "bound": bound,
            "ratio_to_baseline": r_base,
            "bound_baseline": rule.get("max_ratio_to_baseline"),
            "snr_db": m.get("snr_db"),
        }
    )


def _fmt(x: float | None) -> str:
    return "inf/nan" if x is None else f"{x:.4g}"


def evaluate(record: dict[str, Any], tol: Tolerances, under_test: str | None = None) -> Verdict:
    ut = under_test or record.get("under_test") or tol.under_test
    spec = record["spec"]
    v = Verdict(record["case_id"])
    if record.get("oracle_error"):
        v.fail(f"oracle failed: {record['oracle_error']}")
        return v
    provs = record["providers"]
    arch = record.get("arch")
    baseline = record.get("baseline")
    gated_baseline = baseline == tol.baseline
    base_res = provs.get(baseline) if baseline else None
    base_ok = base_res is not None and base_res["status"] == "ok"
    for name, res in provs.items():
        hard = name == ut
        if res["status"] == "unsupported":
            if hard and spec.get("source") == "corpus":
                v.fail(f"{name}: unsupported on a corpus case: {res.get('reason')}")
            elif hard:
                v.skipped = True
            continue
        if res["status"] != "ok":
            if hard:
                v.fail(f"{name}: {res['status']}: {res.get('reason')}")
            else:
                v.warnings.append(f"{name}: {res['status']}: {res.get('reason')}")
            continue
        for tensor, m in res["tensors"].items():
            rule = tol.rule(name, spec["dtype"], tensor, arch, spec.get("distribution"))
            if rule is None:
                if hard:
                    v.fail(
                        f"{name} {tensor}: no tolerance rule for dtype {spec['dtype']} in "
                        f"tolerances v{tol.version}"
                    )
                continue
            bm = base_res["tensors"].get(tensor) if (base_ok and name != baseline) else None
            _check_tensor(
                v,
                name,
                m,
                bm,
                rule,
                gated_baseline and name != baseline,
                tensor,
                spec["dtype"],
                spec["variant"],
                hard,
            )
    if ut not in provs:
        v.fail(f"provider under test {ut!r} did not run")
    return v


def regressions(
    new: dict[str, Any], old: dict[str, Any], tol: Tolerances, under_test: str
) -> list[str]:
    """Regression vs an earlier report on the same case id.

    A tensor regresses when ratio_new > max_growth * ratio_old and ratio_new > min_ratio_to_floor
    (max_growth absorbs run-to-run nondeterminism such as atomics; min_ratio_to_floor ignores
    growth among errors that are still within a couple of roundings), or the status went from
    ok to anything else, or NaN/Inf appeared.
    """
    reg = tol.regression
    out = []
    n, o = new["providers"].get(under_test), old["providers"].get(under_test)
    if n is None or o is None:
        return out
    if o["status"] == "ok" and n["status"] != "ok":
        return [f"status ok -> {n['status']} ({n.get('reason')})"]
    if n["status"] != "ok" or o["status"] != "ok":
        return out
    for tensor, m in n["tensors"].items():
        om = o["tensors"].get(tensor)
        if om is None:
            continue
        rn, ro = m.get("ratio_to_floor"), om.get("ratio_to_floor")
        if rn is None and ro is not None:
            out.append(f"{tensor}: error became non-finite")
        elif (
            rn is not None
            and ro is not None
            and rn > reg["max_growth"] * ro
            and (rn > reg["min_ratio_to_floor"])
        ):
            out.append(f"{tensor}: ratio_to_floor {ro:.3g} -> {rn:.3g} (> x{reg['max_growth']:g})")
    return out
