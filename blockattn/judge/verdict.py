"""Acceptance rules: one results.jsonl record + a tolerance file -> pass/fail with reasons.

Schema 2 (elementwise; blockattn/bounds/ERROR_ANALYSIS.md), per provider (rule = rules[provider]):
  1. every requested provider ran: "error" fails (any provider: the run asked for it), a missing
     provider under test fails, "unsupported" fails on corpus cases for the provider under test;
  2. the file has a rule for the provider under test, naming the accuracy model the provider
     declares (a baseline without a rule is reported, not judged);
  3. per tensor: nonfinite_bad == 0 (NaN/Inf where the FP64 oracle is finite is never rounding);
  4. per tensor: the record's bound was computed with this file's model constants (model_sha), and
     violations <= rule.max_violations, a violation being an element with
     |y - r| > max |round(r +- c E) - r|, E the first-order error bound of the model.
  Failures of the provider under test fail the case; a baseline's are warnings (3, 4) or failures
  (1). Regressions vs a baseline report: see `regressions`.

Schema 1 (whole-tensor, tolerances v1-v3), per tensor of the provider under test
(rule = tolerances[provider][dtype][tensor], overridden
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

from blockattn.judge import metrics
from blockattn.judge.tolerances import Tolerances


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


def _where(w: dict | None) -> str:
    w = w or {}
    keys = ("token", "head", "dim", "seq", "block", "row", "col", "index")
    return ",".join(f"{k}={w[k]}" for k in keys if k in w)


def _evaluate_v2(record: dict[str, Any], tol: Tolerances, ut: str) -> Verdict:
    spec = record["spec"]
    v = Verdict(record["case_id"])
    if record.get("oracle_error"):
        v.fail(f"oracle failed: {record['oracle_error']}")
        return v
    provs = record.get("providers") or {}
    if ut not in provs:
        v.fail(f"provider under test {ut!r} did not run")
    for name, res in provs.items():
        hard = name == ut

        def bad(msg: str, hard: bool = hard, name: str = name) -> None:
            (v.fail if hard else v.warnings.append)(f"{name} {msg}".rstrip())

        status = res.get("status")
        if status == "unsupported":
            # Declared (outside the provider's Supports): never a failure. A refusal at run time
            # of a configuration its Supports declares is a failure, on any case: a kernel must
            # not turn what it promised into a skip.
            if hard and not res.get("declared"):
                v.fail(f"{name}: refused at run time a case its Supports declares: "
                       f"{res.get('reason')}")  # fmt: skip
            elif hard:
                v.skipped = True
            continue
        if status != "ok":  # error, crash, anything else: the run asked for this provider
            v.fail(f"{name}: {status}: {res.get('reason')}")
            continue
        declared = res.get("accuracy_model")
        rule, source = tol.rule_for(name, declared, res.get("reference"))
        if rule is None:
            bad(f": {source}")
            continue
        model = tol.model_for(name, declared, res.get("reference"))
        if declared is not None and declared != model.name:
            bad(f": declares accuracy model {declared!r}, the file judges it by {model.name!r}")
            continue
        tensors = res.get("tensors") or {}
        if not tensors:
            bad(": no tensors in the result")
        for tensor, m in tensors.items():
            if m.get("nonfinite_bad", 0):
                bad(f"{tensor}: {m['nonfinite_bad']} NaN/Inf where the oracle is finite")
            b = m.get("bound")
            check = {"provider": name, "variant": spec.get("variant"), "dtype": spec.get("dtype"),
                     "tensor": tensor, "violations": None, "max_ratio": None,
                     "bound": rule["max_violations"], "model": model.name, "rule": source}
            if b is None:
                bad(f"{tensor}: no elementwise bound in the record (run without this tolerance "
                    "file or an older suite): re-run the case")
            elif b.get("model") != model.name or b.get("model_sha") != model.sha:
                bad(f"{tensor}: bound computed for model {b.get('model')!r} ({b.get('model_sha')})"
                    f", the file has {model.name!r} ({model.sha}): re-run with this file")
            else:
                check.update(violations=b["violations"], max_ratio=b["max_ratio"])
                if b["violations"] > rule["max_violations"]:
                    w = b.get("worst") or {}
                    bad(f"{tensor}: {b['violations']} elements ({b['pct_violations']:.3g}%) beyond "
                        f"the {model.name} bound (allowed {rule['max_violations']}); worst "
                        f"[{_where(w)}] got {w.get('value')} want {w.get('oracle')}: err "
                        f"{_fmt(w.get('err'))} > bound {_fmt(w.get('bound'))}")
            u = m.get("ulp") or {}
            check["pct_correctly_rounded"] = u.get("pct_correctly_rounded")
            v.checks.append(check)
    return v


def evaluate(record: dict[str, Any], tol: Tolerances, under_test: str | None = None) -> Verdict:
    ut = under_test or record.get("under_test") or tol.under_test
    if tol.schema >= 2:
        return _evaluate_v2(record, tol, ut)
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
            over = tol.overrides(name, spec["dtype"], tensor, arch, spec.get("distribution"))
            n_fail = len(v.failures)
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
            # Name the rule that judged: rules.<provider>.<dtype>.<tensor> [+ overrides].
            where = f"rules.{name}.{spec['dtype']}.{tensor}" + "".join(f" + {o}" for o in over)
            v.failures[n_fail:] = [f"{f} [{where}]" for f in v.failures[n_fail:]]
            if v.checks and v.checks[-1]["tensor"] == tensor:
                v.checks[-1]["rule"] = where
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
    if tol.schema >= 2:
        return _regressions_v2(new, old, tol, under_test)
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


def baseline_role(old: dict[str, Any], under_test: str) -> str:
    """The provider of a baseline record to compare the kernel under test with: the one that
    record ran under test (matched by role, whatever it was called then), else the same name."""
    provs = old.get("providers", {})
    role = old.get("under_test")
    return role if role in provs else under_test


def _regressions_v2(
    new: dict[str, Any], old: dict[str, Any], tol: Tolerances, under_test: str
) -> list[str]:
    """Elementwise regression of the provider under test vs the same case in a baseline report.

    Per tensor (constants and their reasons: the file's [regression] table):
      not correctly rounded count  n1 <= not_cr_growth * n0 + max(not_cr_slack_pct% of numel,
                                                                  not_cr_slack_min_elems)
      median ulp error             q1 <= p50_growth * q0 + p50_slack_ulp
      p99.99 ulp error             q1 <= p9999_growth * q0 + p9999_slack_ulp
      violations of the bound      v1 <= v0 + max_new_violations
    A baseline without the provider, the tensor or the elementwise fields fails (closed): it
    cannot show that nothing regressed.
    """
    reg = tol.data["regression"]
    n, o = new["providers"].get(under_test), old.get("providers", {}).get(baseline_role(old,
                                                                                   under_test))
    if n is None:
        return []  # the verdict already fails a run without the provider under test
    if o is None:
        return [f"baseline has no result for {under_test!r}"]
    if o["status"] == "ok" and n["status"] != "ok":
        return [f"status ok -> {n['status']} ({n.get('reason')})"]
    if n["status"] != "ok":
        return []
    if o["status"] != "ok":
        return [f"baseline result is {o['status']!r}: nothing to compare with"]
    out = []
    for tensor, m in n["tensors"].items():
        om = o["tensors"].get(tensor)
        nu, ou = m.get("ulp"), (om or {}).get("ulp")
        if om is None or ou is None or nu is None:
            out.append(f"{tensor}: baseline lacks elementwise metrics (bless a new baseline)")
            continue
        numel = m.get("numel", 0)
        n1 = (100.0 - nu["pct_correctly_rounded"]) / 100.0 * numel
        n0 = (100.0 - ou["pct_correctly_rounded"]) / 100.0 * om.get("numel", numel)
        allow = reg["not_cr_growth"] * n0 + max(
            reg["not_cr_slack_pct"] / 100.0 * numel, reg["not_cr_slack_min_elems"]
        )
        if n1 > allow + 1e-9:
            out.append(
                f"{tensor}: not correctly rounded {100 - ou['pct_correctly_rounded']:.3g}% -> "
                f"{100 - nu['pct_correctly_rounded']:.3g}% ({n0:.0f} -> {n1:.0f} elements, "
                f"allowed {allow:.0f})"
            )
        for q, growth, slack in (("p50", "p50_growth", "p50_slack_ulp"),
                                 ("p99.99", "p9999_growth", "p9999_slack_ulp")):
            if q not in ou.get("quantiles", {}) or q not in nu.get("quantiles", {}):
                # fail closed: a quantile the rule needs is absent (None = recorded non-finite)
                out.append(f"{tensor}: {q} ulp quantile missing from the "
                           f"{'baseline' if q not in ou.get('quantiles', {}) else 'run'}")
                continue
            q1, q0 = nu["quantiles"][q], ou["quantiles"][q]
            if q1 is None and q0 is not None:
                out.append(f"{tensor}: {q} ulp error became non-finite")
            elif q1 is not None and q0 is not None:
                lim = reg[growth] * q0 + reg[slack]
                if q1 > lim:
                    out.append(f"{tensor}: {q} ulp error {q0:.3g} -> {q1:.3g} (> {lim:.3g})")
        if nu.get("hist", {}).get("nonfinite", 0) > ou.get("hist", {}).get("nonfinite", 0):
            out.append(f"{tensor}: NaN/Inf appeared")
        nb, ob = m.get("bound"), om.get("bound")
        if nb is not None and ob is None:  # fail closed: nothing to compare the violations with
            out.append(f"{tensor}: baseline lacks the bound (bless a new baseline)")
        grew = nb is not None and ob is not None and (
            nb["violations"] > ob["violations"] + reg["max_new_violations"]
        )
        if grew:
            out.append(f"{tensor}: bound violations {ob['violations']} -> {nb['violations']}")
    return out
