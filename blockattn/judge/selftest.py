"""Known-answer tests of the judge itself, run by every `gate` and every mutant worker.

A judge that loosens silently (a bound scaled up, a `>=` turned `>`, a rule looked up for the
wrong provider, zero cases counted as a pass) would pass every kernel, the broken ones included.
So before trusting a verdict, the gate feeds the judge outputs whose answer is known exactly,
built from the FP64 oracle and the tolerance file's own model constants (read directly from the
file, not through the lookup code under test):

* y_edge: every element at the far end of its allowance, round(r +- cE): 0 violations;
* y_over: every element one representable step beyond that: every element a violation;
* y_cr:   round(r): 100 % correctly rounded, 0 ulp-quantile above 0.5;
* records that are empty, errored, missing the provider under test or the bound: each fails;
* a gate over zero cases, or with a baseline that shares no case: fails.
Any wrong answer fails the gate (closed) naming the check.
"""

from __future__ import annotations

from typing import Any

import torch

from blockattn.cases.spec import CaseSpec

# Small, seeded, partial blocks, both directions of the rotation: cheap on the interpreter.
SELFTEST_SPECS = (
    CaseSpec(seed=11, variant="plain", lengths=(70, 5, 64), H=2, D=64, dtype="bfloat16",
             source="selftest", name="selftest-plain-bf16"),
    CaseSpec(seed=12, variant="rotary", lengths=(33, 100), H=1, D=64, dtype="float16",
             source="selftest", name="selftest-rotary-fp16"),
)  # fmt: skip


# The spec names the last `run_selftest` went through, in order (tests pin that it is all of
# SELFTEST_SPECS, on every device).
CHECKED: list[str] = []


def _model_from_file(tol, name: str):
    from blockattn.bounds import models

    return models.parse(name, tol.data["models"][name], f"models.{name}")


def _edge_and_over(r: torch.Tensor, cE: torch.Tensor, dtype_name: str):
    from blockattn.bounds.elementwise import round_to, ulp

    lo, hi = round_to(r - cE, dtype_name), round_to(r + cE, dtype_name)
    use_hi = (hi - r).abs() >= (lo - r).abs()
    edge = torch.where(use_hi, hi, lo)
    away = torch.where(use_hi, torch.ones_like(r), -torch.ones_like(r))
    return edge, edge + away * ulp(edge, dtype_name)  # one representable step (or two) beyond


def _fake_record(spec: CaseSpec, ut: str, declared: str | None, tensors: dict,
                 reference: str | None = None) -> dict[str, Any]:
    res = {"status": "ok", "reason": None, "tensors": tensors}
    if declared is not None:
        res["accuracy_model"] = declared
    if reference is not None:
        res["reference"] = reference
    return {"case_id": spec.case_id, "spec": spec.to_dict(), "under_test": ut,
            "baseline": ut, "providers": {ut: res}, "oracle_error": None}


def run_selftest(
    tol, under_test: str, device: str = "cpu", records: list[dict[str, Any]] | None = None
) -> list[str]:
    """Wrong answers of the judge (empty: the judge is sound). Schema-1 files: not applicable.

    The provider under test's declared model/reference come from the registry, else from the
    records being judged (a gate over a report of an outside kernel not loaded here)."""
    from blockattn import providers
    from blockattn.bounds.elementwise import TokenMap, round_to
    from blockattn.cases.inputs import build_inputs
    from blockattn.judge import metrics, verdict
    from blockattn.run.oracle import oracle_bounds, oracle_outputs

    if tol.schema < 2:
        return []
    problems: list[str] = []
    try:
        prov = providers.get(under_test)
        declared, reference = prov.accuracy_model, prov.reference
    except ValueError:
        res = next((r["providers"][under_test] for r in records or []
                    if under_test in r.get("providers", {})), {})  # fmt: skip
        declared, reference = res.get("accuracy_model"), res.get("reference")
    # The model by name straight from the file: the file's own rule, else the declared model,
    # else the reference's rule (an outside kernel); the lookup code is what is under test.
    rules = tol.data["rules"]
    if under_test in rules:
        model_name = rules[under_test]["model"]
    elif declared is not None and declared in tol.data["models"]:
        model_name = declared
    elif reference is not None and reference in rules:
        model_name = rules[reference]["model"]
    else:
        return [f"selftest: no rule applies to {under_test!r} (no file rule, no declared model "
                "the file defines, no reference with a rule)"]
    model = _model_from_file(tol, model_name)
    CHECKED.clear()
    for spec in SELFTEST_SPECS:
        CHECKED.append(spec.name)  # what was checked: a narrowed loop shows in its tests
        inp = build_inputs(spec, device)
        ref = oracle_outputs(inp)
        (bounds,) = oracle_bounds(inp, [model.resolve(spec.dtype)])
        tmap = TokenMap(inp.offsets, inp.T, 64, ref["O"].device)
        dt = spec.torch_dtype
        good, over_t = {}, {}
        for name in ("O", "dQ", "dK", "dV"):  # every output the verdict judges
            r, cE = ref[name], model.c * bounds[name].to(torch.float64)
            edge, over = (t.to(dt) for t in _edge_and_over(r, cE, spec.dtype))  # exact casts
            n = r.numel()
            m_edge = metrics.tensor_metrics(edge, r, spec.dtype, bound=bounds[name], model=model,
                                            tmap=tmap)
            m_over = metrics.tensor_metrics(over, r, spec.dtype, bound=bounds[name], model=model,
                                            tmap=tmap)
            r_cr = round_to(r, spec.dtype)
            m_cr = metrics.tensor_metrics(r_cr.to(dt), r, spec.dtype)
            tag = f"selftest {spec.name} {name}"
            if m_edge["bound"]["violations"] != 0:
                problems.append(f"{tag}: {m_edge['bound']['violations']} violations counted for "
                                "outputs exactly at the bound (expected 0)")
            if m_over["bound"]["violations"] != n:
                problems.append(f"{tag}: {m_over['bound']['violations']} of {n} violations "
                                "counted for outputs one step beyond the bound (expected all)")
            if m_cr["ulp"]["pct_correctly_rounded"] != 100.0 or m_cr["max_abs"] > float(
                (r_cr - r).abs().max()
            ):
                problems.append(f"{tag}: correctly rounded outputs not reported as such")
            nan_out = edge.to(dt).clone().reshape(-1)
            nan_out[0] = float("nan")
            m_nan = metrics.tensor_metrics(nan_out.view_as(r), r, spec.dtype, bound=bounds[name],
                                           model=model, tmap=tmap)
            if m_nan["bound"]["violations"] != 1 or m_nan["nonfinite_bad"] != 1:
                problems.append(f"{tag}: one NaN output counted as {m_nan['bound']['violations']} "
                                f"violations, {m_nan['nonfinite_bad']} NaN/Inf (expected 1, 1)")
            q = m_over["ulp"]["quantiles"]["p50"]
            if q is None or q <= 0.5:
                problems.append(f"{tag}: one step beyond the bound reported at p50 {q} ulp")
            good[name], over_t[name] = m_edge, m_over
        # The verdict over the same numbers: edge passes, over fails, broken records fail.
        def fake(tensors: dict, spec: CaseSpec = spec) -> dict[str, Any]:
            return _fake_record(spec, under_test, declared, tensors, reference)

        rec_good = fake(good)
        rec_over = fake(over_t)
        if not verdict.evaluate(rec_good, tol, under_test).passed:
            problems.append(f"selftest {spec.name}: verdict fails outputs within the bound")
        if verdict.evaluate(rec_over, tol, under_test).passed:
            problems.append(f"selftest {spec.name}: verdict passes outputs beyond the bound")
        broken = {
            "no provider under test": {**rec_good, "providers": {}},
            "errored provider": {**rec_good, "providers": {under_test: {
                "status": "error", "reason": "selftest"}}},
            "no bound in the record": fake({
                k: {**m, "bound": None} for k, m in good.items()}),
            "bound from other constants": fake({
                k: {**m, "bound": {**m["bound"], "model_sha": "0" * 12}} for k, m in good.items()}),
            "an errored baseline": {**rec_good, "providers": {
                **rec_good["providers"], "selftest-baseline": {"status": "error",
                                                               "reason": "selftest"}}},
            "NaN output": fake({
                k: {**m, "nonfinite_bad": 1} for k, m in good.items()}),
            # The provider protocol: a refusal not declared in Supports, on any case; a
            # kernel the file has no rule for that declares an undefined model, or nothing.
            "an undeclared refusal of a corpus case": {
                **rec_good, "spec": {**rec_good["spec"], "source": "corpus"},
                "providers": {under_test: {"status": "unsupported", "reason": "selftest"}}},
            "an undeclared refusal of a fuzz case": {
                **rec_good, "spec": {**rec_good["spec"], "source": "fuzz"},
                "providers": {under_test: {"status": "unsupported", "reason": "selftest"}}},
            "an outside kernel with an undefined model": {**rec_good, "providers": {
                "selftest-outside": {**rec_good["providers"][under_test],
                                     "accuracy_model": "selftest-undefined-model"}}},
            "an outside kernel with no rule, model or reference": {**rec_good, "providers": {
                "selftest-outside": {k: v for k, v in rec_good["providers"][under_test].items()
                                     if k not in ("accuracy_model", "reference")}}},
        }  # fmt: skip
        for what, rec in broken.items():
            judged = "selftest-outside" if "selftest-outside" in rec["providers"] else under_test
            if verdict.evaluate(rec, tol, judged).passed:
                problems.append(f"selftest {spec.name}: verdict passes a record with {what}")
        regs = verdict.regressions(rec_over, rec_good, tol, under_test)
        if not regs:
            problems.append(f"selftest {spec.name}: no regression from edge to beyond-bound")
    from blockattn.judge.gate_rules import decide

    if not decide([], [], None).failed:
        problems.append("selftest: a gate over zero cases passes")
    if not decide([rec_good], [verdict.evaluate(rec_good, tol, under_test)], {}).failed:
        problems.append("selftest: a gate whose baseline shares no case passes")
    return problems
