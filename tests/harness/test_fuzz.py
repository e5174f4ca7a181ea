"""Property test: the kernel agrees with the FP64 oracle within the released tolerances on
Hypothesis-drawn cases (profile `ci` on CPU: a handful of small derandomised cases)."""

from __future__ import annotations

import json

import pytest
import torch
from harness_helpers import TOL_DIR
from hypothesis import given

from blockattn.cases.spec import CaseSpec
from blockattn.cases.strategies import case_specs
from blockattn.judge import tolerances, verdict
from blockattn.judge.evaluate import evaluate_case

# Judge with the newest tolerance file calibrated on this test's device (cpu | cuda).
_TOL_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

pytest.importorskip("oracles")
TOL = tolerances.load(tolerances.latest_released(TOL_DIR, device=_TOL_DEVICE))


@given(spec=case_specs())
def test_kernel_matches_oracle_on_fuzzed_cases(spec: CaseSpec) -> None:
    rec = evaluate_case(spec, ["blockattn", "eager"], "blockattn", "eager", tol=TOL)
    v = verdict.evaluate(rec, TOL)
    # The reproducer is the spec: `blockattn replay '<json>' --tolerances ...` re-runs it.
    assert v.passed, f"{v.failures}\nreplay: blockattn replay '{json.dumps(spec.to_dict())}'"
    assert rec["providers"]["eager"]["status"] == "ok"


@given(spec=case_specs())
def test_drawn_specs_respect_the_space(spec: CaseSpec) -> None:
    from blockattn.cases.strategies import active_space

    space = active_space()
    assert spec.H in space.heads and spec.D in space.head_dims and spec.dtype in space.dtypes
    if spec.lengths is not None:
        assert len(spec.lengths) >= 1 and sum(spec.lengths) <= space.max_total
    else:
        assert 0.0 <= spec.sparsity <= 0.99 and space.max_B >= spec.B
    assert CaseSpec.from_dict(spec.to_dict()) == spec  # reproducers round-trip
