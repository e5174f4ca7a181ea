"""A refusal at run time is a declared refusal only if Supports declared it (issue 21, item 17):
on a corpus case and on a fuzz case alike, an undeclared one fails the verdict."""

from __future__ import annotations

import pytest

from blockattn.judge import tolerances, verdict


@pytest.mark.parametrize("source", ["corpus", "fuzz"])
@pytest.mark.parametrize("declared", [True, False])
def test_an_undeclared_refusal_fails_and_a_declared_one_skips(source: str, declared: bool):
    tol = tolerances.load(tolerances.default_tolerance_dir() / "v4.toml")
    res = {"status": "unsupported", "reason": "mine: no", **({"declared": True} if declared
                                                             else {})}  # fmt: skip
    rec = {"case_id": "plai-bflo-0", "spec": {"source": source, "variant": "plain",
           "dtype": "bfloat16"}, "providers": {"mine": res}, "under_test": "mine"}  # fmt: skip
    v = verdict.evaluate(rec, tol, "mine")
    if declared:
        assert v.passed and v.skipped
    else:
        assert not v.passed and any("refused at run time" in f for f in v.failures), v.failures
