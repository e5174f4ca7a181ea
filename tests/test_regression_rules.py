"""Known answers for every regression rule of the gate (issue 42, item 7): for each rule a
baseline and a run built so that the rule fires just past its documented threshold (the
released tolerance file's [regression] constants, read here, never restated) and does not fire
just inside it, with every other quantity held equal. Rules: each ulp quantile (p50, p99.99),
the not-correctly-rounded share, the bound's violations (max_new_violations), NaN/Inf appearing,
and schema 1's ratio-to-floor growth (max_growth above min_ratio_to_floor)."""

from __future__ import annotations

import copy

import pytest

from blockattn.judge import gate_rules, tolerances, verdict

UT = "blockattn"
NUMEL = 20000


@pytest.fixture(scope="module")
def tol():
    return tolerances.load(tolerances.default_tolerance_dir() / "v5.toml")


def _record(pct_cr=97.0, p50=0.5, p9999=3.0, violations=0, nonfinite=0):
    t = {"numel": NUMEL, "ulp": {"pct_correctly_rounded": pct_cr,
                                 "quantiles": {"p50": p50, "p99.99": p9999},
                                 "hist": {"nonfinite": nonfinite}},
         "bound": {"violations": violations}}  # fmt: skip
    return {"case_id": "c", "under_test": UT,
            "providers": {UT: {"status": "ok", "tensors": {"O": t, "dQ": copy.deepcopy(t)}}}}


def _fires(tol, old, new) -> list[str]:
    return verdict.regressions(new, old, tol, UT)


def _set(rec, **kw):
    rec = copy.deepcopy(rec)
    t = rec["providers"][UT]["tensors"]["dQ"]  # one tensor moves; O stays equal
    for k, v in kw.items():
        if k in ("p50", "p99.99"):
            t["ulp"]["quantiles"][k] = v
        elif k == "pct_cr":
            t["ulp"]["pct_correctly_rounded"] = v
        elif k == "violations":
            t["bound"]["violations"] = v
        elif k == "nonfinite":
            t["ulp"]["hist"]["nonfinite"] = v
    return rec


EPS = 1e-6


@pytest.mark.parametrize("q,growth,slack", [("p50", "p50_growth", "p50_slack_ulp"),
                                            ("p99.99", "p9999_growth", "p9999_slack_ulp")])
def test_each_quantile_rule_fires_just_past_its_threshold(tol, q, growth, slack) -> None:
    reg = tol.data["regression"]
    old = _record()
    q0 = old["providers"][UT]["tensors"]["dQ"]["ulp"]["quantiles"][q]
    lim = reg[growth] * q0 + reg[slack]
    assert _fires(tol, old, old) == []
    assert _fires(tol, old, _set(old, **{q: lim})) == []  # at the threshold: allowed
    assert _fires(tol, old, _set(old, **{q: lim - EPS})) == []
    got = _fires(tol, old, _set(old, **{q: lim + EPS}))
    assert len(got) == 1 and got[0].startswith(f"dQ: {q} ulp error"), got
    # each quantile's own slack: the other quantile's would move the threshold
    other = "p99.99_slack" if q == "p50" else "p50_slack"
    assert reg[slack] != reg[other.replace("p99.99", "p9999") + "_ulp"]


def test_the_not_correctly_rounded_share_fires_just_past_its_allowance(tol) -> None:
    reg = tol.data["regression"]
    old = _record(pct_cr=97.0)
    n0 = 0.03 * NUMEL
    allow = reg["not_cr_growth"] * n0 + max(reg["not_cr_slack_pct"] / 100 * NUMEL,
                                             reg["not_cr_slack_min_elems"])  # fmt: skip

    def pct(n1):
        return 100.0 - 100.0 * n1 / NUMEL

    assert _fires(tol, old, _set(old, pct_cr=pct(allow))) == []
    assert _fires(tol, old, _set(old, pct_cr=pct(allow - 1))) == []
    got = _fires(tol, old, _set(old, pct_cr=pct(allow + 1)))
    assert len(got) == 1 and "dQ: not correctly rounded" in got[0], got


def test_the_slack_floor_of_the_share_is_its_minimum_element_count(tol) -> None:
    reg = tol.data["regression"]
    numel = 100  # 0.5% of 100 is below the minimum element count: the count decides
    old = _record(pct_cr=100.0)
    for t in old["providers"][UT]["tensors"].values():
        t["numel"] = numel
    floor = max(reg["not_cr_slack_pct"] / 100 * numel, reg["not_cr_slack_min_elems"])
    assert floor == reg["not_cr_slack_min_elems"]
    ok = _set(old, pct_cr=100.0 - 100.0 * floor / numel)
    bad = _set(old, pct_cr=100.0 - 100.0 * (floor + 1) / numel)
    assert _fires(tol, old, ok) == [] and len(_fires(tol, old, bad)) == 1


def test_bound_violations_may_grow_by_max_new_violations_and_no_more(tol) -> None:
    m = tol.data["regression"]["max_new_violations"]
    old = _record(violations=2)
    assert _fires(tol, old, _set(old, violations=2 + m)) == []
    got = _fires(tol, old, _set(old, violations=2 + m + 1))
    assert got == [f"dQ: bound violations 2 -> {3 + m}"], got


def test_nan_or_inf_appearing_is_a_regression(tol) -> None:
    old = _record()
    assert _fires(tol, old, _set(old, nonfinite=1)) == ["dQ: NaN/Inf appeared"]


def test_schema_1_ratio_growth_fires_just_past_max_growth_above_the_floor() -> None:
    tol1 = tolerances.load(tolerances.default_tolerance_dir() / "v1.toml")
    reg = tol1.regression

    def rec(r):
        return {"providers": {UT: {"status": "ok", "tensors": {"O": {"ratio_to_floor": r}}}}}

    r0 = 2.0 * reg["min_ratio_to_floor"]
    lim = reg["max_growth"] * r0
    assert verdict.regressions(rec(lim), rec(r0), tol1, UT) == []
    assert len(verdict.regressions(rec(lim * (1 + EPS)), rec(r0), tol1, UT)) == 1
    # below the floor growth is noise, however large
    small = reg["min_ratio_to_floor"] / (2 * reg["max_growth"])
    assert verdict.regressions(rec(reg["min_ratio_to_floor"]), rec(small), tol1, UT) == []


def test_the_gate_fails_on_one_regression_and_passes_at_the_threshold(tol) -> None:
    reg = tol.data["regression"]
    old = _record()
    lim = reg["p50_growth"] * 0.5 + reg["p50_slack_ulp"]

    class V:
        skipped, passed = False, True

    d = gate_rules.decide([_set(old, p50=lim)], [V()], {"c": old}, tol, UT)
    assert not d.failed, d.reasons
    d = gate_rules.decide([_set(old, p50=lim + EPS)], [V()], {"c": old}, tol, UT)
    assert d.failed and d.reasons == ["1 regressions vs the baseline"], d.reasons


def _judged(tol, fa2_violations: int):
    """A v5 record with blockattn under test and fa2 as a baseline, each with a bound."""
    from blockattn.judge.verdict import Verdict

    v = Verdict("case-1")
    for prov, n in ((UT, 0), ("fa2", fa2_violations)):
        rule, _ = tol.rule_for(prov, None if prov == UT else "fa2-rounded-p-ds", None)
        v.checks.append({"provider": prov, "tensor": "dV", "violations": n,
                         "bound": rule["max_violations"], "model": "m"})  # fmt: skip
    return [{"case_id": "case-1", "under_test": UT, "baseline": "fa2"}], [v]


def test_a_baseline_beyond_its_own_bound_fails_the_run_naming_the_baseline(tol) -> None:
    records, verdicts = _judged(tol, 0)
    assert not gate_rules.decide(records, verdicts, None, tol, UT).failed
    allowed = verdicts[0].checks[1]["bound"]
    records, verdicts = _judged(tol, allowed + 1)
    d = gate_rules.decide(records, verdicts, None, tol, UT)
    assert d.failed and len(d.reasons) == 1, d.reasons
    assert d.reasons[0].startswith("baseline fa2 beyond its own m bound on case-1: dV")
    assert f"not the kernel under test ({UT})" in d.reasons[0]
    # another kernel run beside them is not the reference: judged by its own lines, not this rule
    records[0]["baseline"] = "eager"
    assert not gate_rules.decide(records, verdicts, None, tol, UT).failed
    # the same violations on the kernel under test are the verdict's, not this rule's
    records, verdicts = _judged(tol, 0)
    verdicts[0].checks[0]["violations"] = 5
    assert not gate_rules.decide(records, verdicts, None, tol, UT).failed
