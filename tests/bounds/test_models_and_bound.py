"""Accuracy models, the FP64 error bound, and that it separates implementations (oracles/)."""

from __future__ import annotations

import pytest
import torch

from blockattn import providers
from blockattn.bounds import models
from blockattn.bounds.elementwise import TokenMap, elementwise_metrics
from blockattn.cases.inputs import build_inputs
from blockattn.cases.spec import CaseSpec
from blockattn.judge import tolerances
from blockattn.run.oracle import oracle_bounds, oracle_outputs
from oracles import error_bound

V4 = tolerances.default_tolerance_dir() / "v4.toml"


def test_rounding_classes_agree_between_oracle_and_models() -> None:
    assert models.CLASSES == error_bound.CLASSES


@pytest.mark.parametrize(
    ("expr", "dtype", "want"),
    [("u_in^2 + 2 u_fp32", "bfloat16", 2.0**-16 + 2.0**-23), ("2 eta_in", "float16", 2.0**-24),
     ("0", "float32", 0.0), ("tiny_fp32", "bfloat16", 2.0**-126)],
)
def test_expressions(expr: str, dtype: str, want: float) -> None:
    assert models.evaluate(expr, dtype) == want


@pytest.mark.parametrize("bad", ["", "u_in*u_in", "3 x", "u_in^", "-u_in", None])
def test_bad_expressions_are_rejected(bad) -> None:
    with pytest.raises(models.ModelError):
        models.evaluate(bad, "bfloat16")


def test_model_tables_must_name_every_class_and_give_reasons() -> None:
    tol = tolerances.load(V4)
    good = tol.data["models"]["fp32-split-operands"]
    models.parse("x", good, "x")
    for broken in (
        {**good, "u": {k: v for k, v in good["u"].items() if k != "acc"}},
        {**good, "eta": {**good["eta"], "extra": "0"}},
        {**good, "c": 0.5},
        {**good, "c_reason": " "},
    ):
        with pytest.raises(models.ModelError):
            models.parse("x", broken, "x")


def test_bound_is_linear_in_the_model() -> None:
    spec = CaseSpec(seed=5, variant="rotary", lengths=(40, 64), H=1, D=64, dtype="bfloat16")
    inp = build_inputs(spec)
    tol = tolerances.load(V4)
    a = tol.model_for("blockattn").resolve("bfloat16")
    b = tol.model_for("eager").resolve("bfloat16")
    s = {p: {k: a[p][k] + b[p][k] for k in a[p]} for p in ("u", "eta")}
    ea, eb, es = oracle_bounds(inp, [a, b, s])
    for name in ("O", "dQ", "dK", "dV"):
        torch.testing.assert_close(es[name], ea[name] + eb[name], rtol=1e-5, atol=0)


@pytest.mark.parametrize("variant", ["plain", "rotary"])
def test_eager_meets_its_own_model_but_not_blockattns(variant: str) -> None:
    """The bound separates models: eager (P, dS rounded to bf16) is inside the eager model and
    far outside the split-operand model blockattn declares."""
    spec = CaseSpec(seed=7, variant=variant, lengths=(64, 30), H=2, D=64, dtype="bfloat16")
    inp = build_inputs(spec)
    ref = oracle_outputs(inp)
    out = providers.get("eager").run(inp, variant)
    tol = tolerances.load(V4)
    tmap = TokenMap(inp.offsets, inp.T, 64, torch.device("cpu"))
    for prov, expect_violations in (("eager", False), ("blockattn", True)):
        model = tol.model_for(prov)
        (e,) = oracle_bounds(inp, [model.resolve("bfloat16")])
        viol = sum(
            elementwise_metrics(out[k], ref[k], "bfloat16", bound=e[k], c=model.c, tmap=tmap)[
                "bound"
            ]["violations"]
            for k in ref
        )
        assert (viol > 0) == expect_violations, (prov, viol)


def test_model_errors_name_the_missing_class() -> None:
    with pytest.raises(ValueError, match=r"missing u\.rot"):
        error_bound._model_tensors([{"u": {}, "eta": {}}], torch.device("cpu"))
