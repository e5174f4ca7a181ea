"""Verdict rules 4 and 5 (SNR, N-ulp band) and the absolute floor below which they are skipped."""

from __future__ import annotations

from blockattn.judge import metrics, verdict


def _check(m: dict, rule: dict) -> verdict.Verdict:
    v = verdict.Verdict(case_id="x")
    verdict._check_tensor(v, "k", m, None, rule, False, "dQ", "bfloat16", "plain", hard=True)
    return v


def _metrics(max_abs: float, snr_db: float, pct_over: float) -> dict:
    return {"floor_eff": metrics.ATOL_FLOOR["bfloat16"], "max_abs": max_abs, "snr_db": snr_db,
            "snr_inf": False, "ref_max_abs": 1e-9, "pct_over_tol": pct_over, "over_tol": 3,
            "nonfinite_bad": 0, "worst": {}}  # fmt: skip


RULE = {"max_ratio_to_floor": 3.0, "min_snr_db": 20.0, "max_pct_over_tol": 1.0}


def test_relative_rules_skip_errors_below_the_absolute_floor() -> None:
    # Saturated softmax: the oracle dQ is ~1e-9, the kernel's error 1e-9 (SNR 0 dB, every element
    # outside the relative band), yet 1000x under the bf16 absolute floor: not a failure.
    assert _check(_metrics(1e-9, 0.0, 100.0), RULE).passed


def test_relative_rules_still_fire_above_the_absolute_floor() -> None:
    atol = metrics.ATOL_FLOOR["bfloat16"]
    v = _check(_metrics(2 * atol, 0.0, 100.0), RULE)
    assert not v.passed
    assert any("SNR" in f for f in v.failures) and any("N-ulp band" in f for f in v.failures)


def test_schema1_failures_name_the_rule_and_override_that_judged() -> None:
    from harness_helpers import minimal_doc

    from blockattn.judge.tolerances import Tolerances

    doc = minimal_doc()
    doc["rules"]["blockattn"]["bfloat16"]["dQ"]["dist"] = {"near_constant": {
        "max_ratio_to_floor": 1.5}}  # fmt: skip
    tol = Tolerances(None, doc, "0" * 64, doc["rules"])
    atol = metrics.ATOL_FLOOR["bfloat16"]
    rec = {"case_id": "c", "arch": "cpu", "baseline": "eager", "oracle_error": None,
           "spec": {"dtype": "bfloat16", "variant": "plain", "distribution": "near_constant",
                    "source": "corpus"},
           "providers": {"blockattn": {"status": "ok", "tensors": {
               "dQ": {**_metrics(2 * atol, 60.0, 0.0), "floor_eff": atol}}}}}  # fmt: skip
    v = verdict.evaluate(rec, tol, "blockattn")  # 2x the floor: > 1.5 (override), < 4 (base)
    assert not v.passed
    assert v.failures[0].endswith("[rules.blockattn.bfloat16.dQ + dist.near_constant]")
    rec["spec"]["distribution"] = "normal"
    assert verdict.evaluate(rec, tol, "blockattn").passed
    assert verdict.evaluate(rec, tol, "blockattn").checks[0]["rule"] == (
        "rules.blockattn.bfloat16.dQ")
