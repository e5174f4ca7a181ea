"""The judged space spans the declared block sizes: case specs carry `block_size`, ids stay as
they were at the default, the fuzz sample draws other sizes from what the provider declares, and
every stage (oracle, bound, kernel call) uses the spec's size."""

from __future__ import annotations

import pytest

from blockattn.cases import plan, strategies
from blockattn.cases.spec import CaseSpec
from blockattn.judge.evaluate import evaluate_case
from blockattn.providers import Supports


def test_block_size_is_in_the_id_only_off_its_default() -> None:
    a = CaseSpec(lengths=(5, 70), block_size=64)
    assert a.case_id == CaseSpec(lengths=(5, 70)).case_id  # earlier ids (corpus v1) unchanged
    assert "block_size" not in a.identity()
    b = CaseSpec(lengths=(5, 70), block_size=24)
    assert b.case_id != a.case_id and b.identity()["block_size"] == 24
    assert "block_size=24" in b.short()
    assert CaseSpec.from_dict(b.to_dict()) == b  # replay rebuilds it


@pytest.mark.parametrize("bad", [0, 129, 64.0, True, "64"])
def test_a_bad_block_size_is_named(bad) -> None:
    with pytest.raises((ValueError, TypeError), match="block_size"):
        CaseSpec(block_size=bad)


def test_fuzz_draws_other_block_sizes_only_where_declared() -> None:
    space = strategies.SPACES["ci"]
    drawn = {s.block_size for s in strategies.sample_specs(space, 60, 3)}
    assert drawn == {1, 24, 64, 128}, drawn
    only64 = plan.restricted_space(space, plan.Selection(), Supports(block_sizes=(64,)))
    assert {s.block_size for s in strategies.sample_specs(only64, 60, 3)} == {64}
    some = plan.restricted_space(space, plan.Selection(), Supports(block_sizes=(24, 64)))
    assert {s.block_size for s in strategies.sample_specs(some, 60, 3)} == {24, 64}
    none = plan.restricted_space(space, plan.Selection(), Supports(block_sizes=(7,)))
    assert none is None  # nothing the provider runs: no fuzz budget spent


def test_each_stage_uses_the_specs_block_size() -> None:
    # blockattn and eager at block size 24: both judged against the oracle at 24 (the eager
    # baseline cuts its blocks at 24 too), every element within its model's bound.
    from blockattn.judge import tolerances

    tol = tolerances.load(tolerances.resolve_path("v4"))
    spec = CaseSpec(lengths=(0, 30, 50), H=1, D=64, block_size=24, seed=5)
    rec = evaluate_case(spec, ["blockattn", "eager"], "blockattn", "eager", tol=tol)
    for name in ("blockattn", "eager"):
        res = rec["providers"][name]
        assert res["status"] == "ok", res
        assert all(m["nonfinite_bad"] == 0 for m in res["tensors"].values())
        assert res["tensors"]["O"]["bound"]["violations"] == 0, res["tensors"]["O"]["bound"]
    # The oracle at 24 and at 64 differ by far more than that error: the size reached it.
    from blockattn.cases.inputs import build_inputs
    from blockattn.run.oracle import oracle_outputs

    o24 = oracle_outputs(build_inputs(spec))["O"]
    o64 = oracle_outputs(build_inputs(CaseSpec(lengths=(0, 30, 50), H=1, D=64, seed=5)))["O"]
    assert (o24 - o64).abs().max() > 0.05
    assert rec["providers"]["blockattn"]["tensors"]["O"]["max_abs"] < 0.01


def test_a_declared_block_size_refusal_is_unsupported() -> None:
    spec = CaseSpec(lengths=(10,), block_size=24)
    why = Supports(block_sizes=(64,)).refusal(spec, "cpu", "cpu", spec.block_size)
    assert why == "declared block sizes [64], case uses 24"
