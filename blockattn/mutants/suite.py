"""Planted bugs in the judge itself: each makes the suite fail open or judge more loosely than
its tolerance file says, so every kernel (the broken ones too) would pass.

They are killed by the judge's known-answer tests (`blockattn/judge/selftest.py`), which every
mutant worker and every `blockattn gate` runs first, and by the CPU tier's tests of the judge
(tests/bounds, tests/harness). A bug no gate run can show (a bound term the self-test computes
with the same code, a rule for an input the quick tier never has) names the tests that kill it
(`Mutant.tests`): the worker runs them on the mutated copy. Anchors follow the catalog's rule:
each occurs exactly once.
"""

from __future__ import annotations

from blockattn.mutants.mutant import ERROR_BOUND, Mutant

# the verdict's rule for a kernel under test that raised Unsupported at run time
_REFUSAL = ('            if hard and not res.get("declared"):\n'
            '                v.fail(f"{name}: refused')

EL = "bounds/elementwise.py"
VERDICT = "judge/verdict.py"
TOL = "judge/tolerances.py"
GATE = "judge/gate_rules.py"

SUITE: tuple[Mutant, ...] = (
    Mutant(
        "suite-bound-scaled-up",
        "suite",
        EL,
        "cE = c * b_all[i0 : i0 + chunk]",
        "cE = 4 * c * b_all[i0 : i0 + chunk]",
        "the elementwise bound uses 4c instead of the file's c (judges 4x more loosely)",
        ci=True,
    ),
    Mutant(
        "suite-ulp-one-bit-short",
        "suite",
        EL,
        "return torch.exp2(e - p)",
        "return torch.exp2(e - p + 1)",
        "ulp computed with p - 1 significand bits: every ulp doubled, every error looks halved",
    ),
    Mutant(
        "suite-nan-output-not-a-violation",
        "suite",
        EL,
        "e = torch.where(bad, torch.full_like(e, math.inf), e)",
        "e = torch.where(bad, torch.zeros_like(e), e)",
        "a NaN/Inf output where the oracle is finite counts as zero error elementwise",
    ),
    Mutant(
        "suite-violations-only-warn",
        "suite",
        VERDICT,
        'if b["violations"] > rule["max_violations"]:\n'
        '                    w = b.get("worst") or {}\n                    bad(',
        'if b["violations"] > rule["max_violations"]:\n'
        '                    w = b.get("worst") or {}\n                    v.warnings.append(',
        "bound violations of the provider under test become warnings",
    ),
    Mutant(
        "suite-model-sha-unchecked",
        "suite",
        VERDICT,
        'elif b.get("model") != model.name or b.get("model_sha") != model.sha:',
        'elif b.get("model") != model.name:',
        "a bound computed with other constants (an older, looser file) is accepted",
    ),
    Mutant(
        "suite-nonfinite-ignored",
        "suite",
        VERDICT,
        '            if m.get("nonfinite_bad", 0):\n                bad(f"{tensor}:',
        '            if False and m.get("nonfinite_bad", 0):\n                bad(f"{tensor}:',
        "NaN/Inf outputs where the oracle is finite are not a failure",
    ),
    Mutant(
        "suite-errored-baseline-ignored",
        "suite",
        VERDICT,
        'if status != "ok":  # error, crash, anything else: the run asked for this provider\n'
        '            v.fail(f"{name}: {status}: {res.get(\'reason\')}")',
        'if status != "ok":  # error, crash, anything else: the run asked for this provider\n'
        '            bad(f": {status}: {res.get(\'reason\')}")',
        "an errored or crashed baseline provider is only a warning",
    ),
    Mutant(
        "suite-regressions-ignored",
        "suite",
        VERDICT,
        "    if tol.schema >= 2:\n        return _regressions_v2(new, old, tol, under_test)",
        "    if tol.schema >= 2:\n        return []",
        "elementwise regressions against the baseline are never reported",
    ),
    Mutant(
        "suite-model-of-baseline",
        "suite",
        TOL,
        'name = rule["model"]',
        'name = self.rules[self.baseline]["model"]',
        "every provider is judged by the baseline's (looser) accuracy model",
    ),
    Mutant(
        "suite-undeclared-refusal-skipped",
        "suite",
        VERDICT,
        _REFUSAL,
        _REFUSAL.replace("not res.get", "res.get"),
        "a kernel refusing a case it declared it supports is skipped, not failed",
    ),
    Mutant(
        "suite-undeclared-fuzz-refusal-skipped",
        "suite",
        VERDICT,
        _REFUSAL,
        _REFUSAL.replace("if hard and", 'if hard and spec.get("source") == "corpus" and'),
        "a refusal at run time of a declared case is failed on the corpus only: on a fuzz case "
        "it becomes a skip (and a pytest skip)",
    ),
    Mutant(
        "suite-outside-kernel-no-rule-passes",
        "suite",
        VERDICT,
        '        if rule is None:\n            bad(f": {source}")\n            continue',
        '        if rule is None:\n            continue',
        "a provider no rule applies to (no file rule, no declared model, no reference) passes",
    ),
    Mutant(
        "suite-zero-cases-pass",
        "suite",
        GATE,
        "    if not records or not judged:\n",
        "    if False:\n",
        "a gate over zero cases passes",
        ci=True,
    ),
    Mutant(
        "suite-baseline-without-overlap-passes",
        "suite",
        GATE,
        "        if records and shared == 0:\n",
        "        if False:\n",
        "a baseline that shares no case with the run passes (nothing was compared)",
    ),
    # --- the held-out kinds of issue 21, item 17: killed by the judge's own tests
    Mutant(
        "suite-bound-length-grows-with-d",
        "suite",
        ERROR_BOUND,
        'e_s = e_s + D * (m["u.acc"] * a_qk + m["eta.acc"])',
        'e_s = e_s + (D * D // 64) * (m["u.acc"] * a_qk + m["eta.acc"])',
        "the scores' accumulation term counts D^2/64 additions: equal at D=64, 2x looser at 128",
        tests=("tests/bounds/test_known_answers.py",),
    ),
    Mutant(
        "suite-bound-magnitude-loosened",
        "suite",
        ERROR_BOUND,
        'self.bs * (m["u.acc"] * (p @ av) + m["eta.acc"])',
        'self.bs * (m["u.acc"] * av.amax(dim=-2, keepdim=True) + m["eta.acc"])',
        "O's accumulation term uses max |V| instead of P |V| (a looser upper bound)",
        tests=("tests/bounds/test_known_answers.py",),
    ),
    Mutant(
        "suite-zero-exact-values-ignored",
        "suite",
        EL,
        "        fin = torch.isfinite(r)\n",
        "        fin = torch.isfinite(r) & (r != 0)\n",
        "elements whose exact value is 0 (structural zeros: one-token blocks' gradients) are "
        "never judged",
        tests=("tests/bounds/test_zeros_and_subnormals.py",),
    ),
    Mutant(
        "suite-missing-quantile-skipped",
        "suite",
        VERDICT,
        "                out.append(f\"{tensor}: {q} ulp quantile missing from the \"\n",
        "                continue\n"
        "                out.append(f\"{tensor}: {q} ulp quantile missing from the \"\n",
        "a regression rule whose quantile is missing from the run or the baseline is skipped",
        tests=("tests/harness/test_refusals.py",),
    ),
    Mutant(
        "suite-selftest-narrowed",
        "suite",
        "judge/selftest.py",
        "    for spec in SELFTEST_SPECS:\n",
        "    for spec in SELFTEST_SPECS[:1]:\n",
        "the judge's self-test checks only its first spec (plain bf16)",
        tests=("tests/harness/test_refusals.py",),
    ),
    Mutant(
        "suite-plugin-refusal-skipped",
        "suite",
        "pytest_plugin.py",
        "        if v.passed and v.skipped:\n",
        "        if (rec[\"providers\"].get(p.under_test) or {}).get(\"status\") == \"unsupported\""
        ":\n",
        "the pytest plugin skips every run-time refusal, declared by Supports or not",
        tests=("tests/plugin/test_pytest_plugin.py::"
               "test_a_refusal_its_supports_did_not_declare_fails_not_skips",),
    ),
    Mutant(
        "suite-bound-signed-scale",
        "suite",
        ERROR_BOUND,
        "asc = abs(sc)  # magnitudes and errors scale with |scale|",
        "asc = sc  # magnitudes and errors scale with |scale|",
        "the logits' bound uses the signed scale: at scale < 0 it shrinks or turns negative (the "
        "false alarms of results/h200_2026-11-27g: a correct kernel and FA2 judged too tightly)",
        tests=("tests/bounds/test_negative_scale.py",),
    ),
    Mutant(
        "suite-bound-softmax-first-order-only",
        "suite",
        ERROR_BOUND,
        "e_p = e_p + _softmax_excess(p, e_arg, e_p)  # the exponential beyond first order",
        "e_p = e_p  # the exponential beyond first order",
        "the bound of P stays first order when the logits' bound is not small next to 1: below "
        "what the model allows (issue 42: eager's bf16 dK/dV on a scaled_logits case flagged on "
        "CPU, blockattn gate --seed 1557678679)",
        tests=("tests/bounds/test_large_logit_errors.py",),
    ),
    Mutant(
        "suite-bound-no-rounding-after-scale",
        "suite",
        ERROR_BOUND,
        'e_dsg = e_dsg + _after_scale(ds, m, "dS_gemm", sc)  # eager: scale * dS rounded again',
        'e_dsg = e_dsg  # eager: scale * dS rounded again',
        "eager's second rounding of dS, as scale * dS, is dropped from its bound: at a tiny scale "
        "that value is subnormal in fp16 and errs by up to eta / |scale| in units of dS (issue "
        "42: eager fp16 dQ/dK flagged on CPU, blockattn gate --seed 1557678608 --no-contract "
        "--fuzz-only --fuzz 4)",
        tests=("tests/bounds/test_scaled_ds_rounding.py",),
    ),
    Mutant(
        "suite-bound-eager-not-after-scale",
        "suite",
        "bounds/models.py",
        'AFTER_SCALE: dict[str, tuple[str, ...]] = {"eager-input-dtype": ("dS_gemm",)}',
        "AFTER_SCALE: dict[str, tuple[str, ...]] = {}",
        "the eager model no longer declares that it rounds scale * dS: its bound loses the "
        "rounding after the scale (as suite-bound-no-rounding-after-scale, through the model)",
        tests=("tests/bounds/test_scaled_ds_rounding.py",),
    ),
    Mutant(
        "suite-false-alarms-blind-to-baselines",
        "suite",
        "commands/false_alarms.py",
        "        base_bad = gate_rules.baseline_failures(records, vs, ut)",
        "        base_bad = []",
        "false-alarms counts per-case verdicts only: a baseline beyond its own bound fails every "
        "gate of the seed and no false-alarm run shows it (found 2026-11-27 by the eager fix)",
        tests=("tests/mutants/test_false_alarms.py::test_a_baseline_beyond_its_bound_is_an_alarm",),
    ),
)
