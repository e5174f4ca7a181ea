"""The harness records a CUDA out-of-memory error per case and goes on with the next case.

Runs on CPU: torch.cuda.OutOfMemoryError is raised by monkeypatched stages (input building, the
FP64 oracle, a provider), exactly as the CUDA caching allocator would raise it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from blockattn import cli, pipeline, providers
from blockattn.cases.spec import CaseSpec
from blockattn.judge import evaluate, tolerances, verdict
from blockattn.run import execute

# Tiny cases: the interpreter runs each in well under a second.
SPECS = [
    CaseSpec(seed=s, lengths=(3, 65), H=1, D=64, dtype="bfloat16", name=f"oom-{s}")
    for s in range(3)
]
OOM = "CUDA out of memory. Tried to allocate 4.00 GiB"


def _oom_once_for(case_seed: int, real):
    """Wrap a stage so it raises OOM for the case with this seed, else runs for real."""

    def stage(inp, *args):
        if inp.spec.seed == case_seed:
            raise torch.cuda.OutOfMemoryError(OOM)
        return real(inp, *args)

    return stage


def test_oom_in_each_stage_is_recorded_and_the_run_goes_on(tmp_path: Path, monkeypatch) -> None:
    real_build = evaluate.build_inputs

    def build(spec, dev):
        if spec.seed == 0:
            raise torch.cuda.OutOfMemoryError(OOM)
        return real_build(spec, dev)

    monkeypatch.setattr(evaluate, "build_inputs", build)
    monkeypatch.setattr(evaluate, "oracle_outputs", _oom_once_for(1, evaluate.oracle_outputs))
    blockattn_run = providers.get("blockattn").run
    providers.register("oom_kernel", _oom_once_for(2, blockattn_run))
    try:
        tol = tolerances.load(
            tolerances.latest_released(tolerances.default_tolerance_dir(), device="cpu")
        )
        recs = pipeline.run_cases(
            SPECS,
            tmp_path,
            provider_names=["oom_kernel", "eager"],
            under_test="oom_kernel",
            baseline="eager",
            tol=None,
            progress=False,
        )
    finally:
        providers.unregister("oom_kernel")
    by_seed = {r["spec"]["seed"]: r for r in recs}
    assert sorted(by_seed) == [0, 1, 2], "a case after an OOM was not run"
    assert by_seed[0]["oracle_error"].startswith("building inputs: OutOfMemoryError")
    assert by_seed[0]["providers"] == {} and by_seed[0]["T"] is None
    assert by_seed[1]["oracle_error"].startswith("OutOfMemoryError")
    p2 = by_seed[2]["providers"]
    assert p2["oom_kernel"]["status"] == "error" and OOM in p2["oom_kernel"]["reason"]
    assert p2["eager"]["status"] == "ok", "the next provider of the OOM case did not run"
    # Each OOM case fails its verdict (an error is never a pass); report renders them all.
    for seed in range(3):
        v = verdict.evaluate(by_seed[seed], tol, "oom_kernel")
        assert not v.passed and "OutOfMemoryError" in " ".join(v.failures), (seed, v.failures)
    assert cli.main(["report", str(tmp_path)]) == 0


def test_unexpected_oom_clears_the_cuda_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # After an OOM the runner returns cached blocks so the next (smaller) case can allocate.
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(1))
    execute.release_cuda_memory(RuntimeError("not an OOM"))
    assert calls == []
    execute.release_cuda_memory(torch.cuda.OutOfMemoryError(OOM))
    assert calls == [1]


@pytest.mark.gpu
def test_real_cuda_oom_is_recorded_and_the_next_case_runs(tmp_path: Path) -> None:
    total = torch.cuda.get_device_properties(0).total_memory

    def hog(inp, variant):
        if inp.spec.seed == 0:  # twice the device memory: a real allocator OOM
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")
        return providers.get("blockattn").run(inp, variant)

    providers.register("hog", hog)
    try:
        recs = pipeline.run_cases(
            SPECS[:2],
            tmp_path,
            provider_names=["hog", "eager"],
            under_test="hog",
            baseline="eager",
            progress=False,
        )
    finally:
        providers.unregister("hog")
    by_seed = {r["spec"]["seed"]: r["providers"]["hog"] for r in recs}
    assert by_seed[0]["status"] == "error" and "OutOfMemoryError" in by_seed[0]["reason"]
    assert by_seed[1]["status"] == "ok", by_seed[1].get("reason")


def test_a_bad_next_spec_does_not_lose_the_case_in_flight(tmp_path: Path, monkeypatch) -> None:
    """Isolated, case i+1 is begun before case i is judged: when beginning it raises a usage
    error, case i (already run) is judged and written first, then the error goes to the command."""

    class Ahead:  # a sandbox that calls in a worker: run_cases sends one case ahead
        in_process = False

        def isolate(self, names: list[str]) -> None:
            pass

    real_build = evaluate.build_inputs

    def build(spec, dev):
        if spec.seed == 1:
            raise ValueError("bad spec for this test")
        return real_build(spec, dev)

    monkeypatch.setattr(pipeline.isolated, "active", lambda: Ahead())
    monkeypatch.setattr(evaluate, "build_inputs", build)
    with pytest.raises(ValueError, match="bad spec for this test"):
        pipeline.run_cases(SPECS, tmp_path, provider_names=["blockattn"], under_test="blockattn",
                           baseline="blockattn", tol=None, progress=False)  # fmt: skip
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["spec"]["seed"] for x in lines] == [0], lines
