"""Outside kernels through the one provider protocol: --provider, entry points, Supports, judging.

A scratch module outside this repo defines a clean thin wrapper of blockattn and one with a planted
bug; through the CLI the clean one passes, the buggy one fails with a replay line that reproduces
the failure from another directory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from blockattn import cli, providers
from blockattn.cases.spec import CaseSpec
from blockattn.judge import tolerances
from blockattn.judge.evaluate import evaluate_case
from blockattn.judge.verdict import evaluate

pytest.importorskip("oracles")

REPO = Path(__file__).resolve().parents[2]
# The shipped example (clean + buggy) plus kernels that exercise every way of being judged.
SCRATCH = (REPO / "examples" / "outside_kernel.py").read_text() + '''


def undeclared(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    return _attention(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)


@kernel(accuracy_model="no-such-model")
def unknown_model(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    return _attention(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)


@kernel(reference="blockattn", supports=SUPPORTS)
def by_reference(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    return _attention(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)


def not_differentiable(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    return _attention(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v).detach()
'''
# Two small corpus cases: a partial block in bf16 and fused rotary in fp16.
CASES = ["--case", "edge-lengths-plain-bf16", "--case", "edge-lengths-rotary-fp16"]
TOL = tolerances.load(tolerances.latest_released(tolerances.default_tolerance_dir(), "cpu"))


@pytest.fixture()
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    repo = tmp_path / "userrepo"
    repo.mkdir()
    (repo / "scratchkern.py").write_text(SCRATCH)
    monkeypatch.chdir(repo)  # --provider imports from the working directory, as a user's repo
    monkeypatch.delitem(sys.modules, "scratchkern", raising=False)
    yield repo
    for name in [n for n in providers.all_providers() if n not in providers._discover()]:
        providers.unregister(name)


def _run(out: Path, *extra: str) -> int:
    # --no-contract: the battery is tested in tests/contract (CI time)
    return cli.main(["run", "--out", str(out), "--corpus-only", "--no-progress", "--no-contract",
                     "--no-selfcheck", "--tolerances", str(TOL.path), *CASES, *extra])  # fmt: skip


def test_clean_outside_kernel_passes_buggy_fails_with_a_replay_that_reproduces(
    scratch: Path, capsys
) -> None:
    assert _run(scratch / "clean", "--provider", "scratchkern:clean") == 0, capsys.readouterr()
    rep = json.loads((scratch / "clean" / "report.json").read_text())
    assert rep["meta"]["under_test"] == "clean"
    assert rep["meta"]["provider_specs"] == {"clean": "clean=scratchkern:clean"}
    res = rep["cases"][0]["providers"]["clean"]
    assert res["provider"]["origin"] == "scratchkern:clean"
    assert res["accuracy_model"] == "fp32-split-operands"

    capsys.readouterr()
    assert _run(scratch / "bug", "--provider", "bug=scratchkern:buggy") == 1
    err = capsys.readouterr().err
    replay = next(line.split("replay: ", 1)[1] for line in err.splitlines() if "replay: " in line)
    assert "beyond the fp32-split-operands bound" in err
    repro = json.loads(Path(replay.split()[2]).read_text())
    assert repro["provider_specs"] == {"bug": "bug=scratchkern:buggy"}
    # The printed command, as a user pastes it, from another directory: same kernel, same FAIL.
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # blockattn importable, the kernel module not
    p = subprocess.run([sys.executable, "-m", "blockattn", *replay.split()[1:]], cwd="/",
                       capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAIL" in p.stdout and "bug O:" in p.stdout and "beyond the" in p.stdout


def test_declared_unsupported_configurations_are_skipped_not_failed(scratch: Path) -> None:
    prov = providers.load_spec("scratchkern:clean")
    assert not prov.supports.projection  # no projection callable declared
    spec = CaseSpec(seed=5, variant="projection", lengths=(20, 3), H=2, D=64, source="corpus")
    rec = evaluate_case(spec, ["clean"], "clean", "clean", tol=TOL)
    res = rec["providers"]["clean"]
    assert res["status"] == "unsupported" and res["declared"], res
    v = evaluate(rec, TOL, "clean")
    assert v.passed and v.skipped  # a corpus case, yet declared: never a failure
    # A refusal the provider did NOT declare still fails on a corpus case.
    rec["providers"]["clean"]["declared"] = False
    assert not evaluate(rec, TOL, "clean").passed
    # dtype outside Supports.dtypes
    spec32 = CaseSpec(seed=5, lengths=(9,), H=1, D=64, dtype="float32", source="corpus")
    r32 = evaluate_case(spec32, ["clean"], "clean", "clean", tol=TOL)["providers"]["clean"]
    assert r32["status"] == "unsupported" and "float32" in r32["reason"]


@pytest.mark.parametrize(
    ("target", "passes", "why"),
    [
        ("undeclared", True, "fa2-rounded-p-ds"),  # the default model, never "no rule"
        ("by_reference", True, "reference blockattn"),
        ("unknown_model", False, "does not define"),
        ("not_differentiable", False, "does not require grad"),
    ],
)
def test_how_an_outside_kernel_is_judged(
    scratch: Path, target: str, passes: bool, why: str
) -> None:
    prov = providers.load_spec(f"scratchkern:{target}")
    spec = CaseSpec(seed=6, lengths=(70, 5), H=1, D=64, source="corpus")
    rec = evaluate_case(spec, [prov.name], prov.name, prov.name, tol=TOL)
    v = evaluate(rec, TOL, prov.name)
    assert v.passed is passes, (v.failures, rec["providers"][prov.name].get("reason"))
    text = json.dumps([v.failures, v.checks, rec["providers"][prov.name].get("reason")])
    assert why in text


def test_a_buggy_kernel_fails_under_every_judging_route(scratch: Path) -> None:
    # The default model (fa2-rounded-p-ds) sees a 1 % softmax-scale bug; eager-input-dtype, which
    # rounds S to bf16, would not (measured): that is why it is not the default.
    src = (scratch / "scratchkern.py").read_text()
    (scratch / "scratchkern.py").write_text(src + "\n\ndef buggy_undeclared(q, k, v, offsets, *, "
        "block_size, scale, sinu_pos, rotate_v):\n    return _attention(q, k, v, offsets, "
        "block_size, scale * 1.01, sinu_pos, rotate_v)\n")  # fmt: skip
    prov = providers.load_spec("scratchkern:buggy_undeclared")
    spec = CaseSpec(seed=6, lengths=(70, 5), H=1, D=64, source="corpus")
    rec = evaluate_case(spec, [prov.name], prov.name, prov.name, tol=TOL)
    assert not evaluate(rec, TOL, prov.name).passed
    providers.register(dataclasses.replace(prov, name="loose", accuracy_model="eager-input-dtype"))
    rec = evaluate_case(spec, ["loose"], "loose", "loose", tol=TOL)
    assert evaluate(rec, TOL, "loose").passed  # the resolution limit of the loose model


def test_provider_spec_errors_name_the_option(scratch: Path, capsys) -> None:
    for spec, msg in [
        ("nomodule_xyz:fn", "cannot import"),
        ("scratchkern:nope", "has no attribute"),
        ("scratchkern", "expected [NAME=]MODULE:CALLABLE"),
        ("blockattn=scratchkern:clean", "built-in"),
    ]:
        assert cli.main(["run", "--provider", spec, "--corpus-only", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert "--provider" in err and msg in err, (spec, err)


def test_entry_point_providers_are_found_by_name(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A minimal installed distribution whose entry_points.txt registers a provider.
    dist = scratch / "scratch_kernels-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: scratch-kernels\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{providers.ENTRY_POINT_GROUP}]\nepkern = scratchkern:clean\n"
    )
    monkeypatch.syspath_prepend(str(scratch))
    assert "epkern" in providers.entry_points()
    prov = providers.get("epkern")
    assert prov.name == "epkern" and prov.origin.startswith("entry point")
    assert prov.accuracy_model == "fp32-split-operands"


def test_supports_refusal_reasons() -> None:
    s = providers.Supports(dtypes=("bfloat16",), head_dims=(64,), devices=("cuda",),
                           archs=("sm_100",))  # fmt: skip
    spec = CaseSpec(lengths=(3,), H=1, D=64)
    assert "devices" in s.refusal(spec, "cpu", "cpu")
    assert "sm_100" in s.refusal(spec, "cuda", "sm_90")
    assert s.refusal(spec, "cuda", "sm_100") is None
    assert "D=128" in s.refusal(CaseSpec(lengths=(3,), H=1, D=128), "cuda", "sm_100")
    with pytest.raises(ValueError, match="dtypes"):
        providers.Supports(dtypes=("int8",))
    gqa = CaseSpec(variant="projection", lengths=(3,), H=2, kvheads=1, D=64)
    assert "GQA" in providers.get("blockattn").supports.refusal(gqa, "cpu", "cpu")


def test_scratch_module_text_is_valid() -> None:
    compile(textwrap.dedent(SCRATCH), "scratchkern.py", "exec")


def test_one_definition_serves_the_bench_too(scratch: Path, device: str) -> None:
    import torch

    from blockattn.bench.case import make_bench_case
    from blockattn.bench.entries import add_outside, entry
    from blockattn.bench.runner import BenchConfig, plan

    prov = providers.load_spec("scratchkern:clean")
    names = add_outside(prov)
    try:
        assert names == ("clean", "clean_rotary")
        case = make_bench_case("t", B=2, max_len=70, sparsity=0.2, H=1, D=64,
                               dtype=torch.bfloat16, device=torch.device(device), seed=3)
        for name in names:
            prep = entry(name).prepare(case)
            outs = {"O": prep.fwd()}
            outs.update(zip(("dQ", "dK", "dV"), prep.bwd(), strict=True))
            chk = case.check(outs, entry(name).rotary, 2)  # the bench's own oracle check
            assert chk["check"] == "pass", (name, chk)
        specs = plan(BenchConfig(out="x", smoke=True, outside=names))
        mains = [s for s in specs if s.group == "main"]
        assert mains and all(set(names) <= set(s.providers) for s in mains)
    finally:
        providers.unregister(prov.name)


def test_a_declared_projection_callable_is_judged_on_projection_cases(scratch: Path) -> None:
    src = (scratch / "scratchkern.py").read_text()
    (scratch / "scratchkern.py").write_text(src + '''

def _proj(x, w, sinu_pos, offsets, *, qheads, kvheads, bias, block_size, scale, rotate_v):
    return blockattn.projection_rotary_attention(x, w, sinu_pos, offsets, qheads=qheads,
        kvheads=kvheads, bias=bias, block_size=block_size, scale=scale, rotate_v=rotate_v)


@kernel(supports=SUPPORTS, accuracy_model="fp32-split-operands", projection=_proj)
def with_projection(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    return _attention(q, k, v, offsets, block_size, scale, sinu_pos, rotate_v)
''')
    prov = providers.load_spec("scratchkern:with_projection")
    assert prov.supports.projection and prov.projection is not None
    spec = CaseSpec(seed=8, variant="projection", lengths=(70, 3), H=2, D=64, source="corpus")
    rec = evaluate_case(spec, [prov.name], prov.name, prov.name, tol=TOL)
    res = rec["providers"][prov.name]
    assert res["status"] == "ok" and set(res["tensors"]) == {"O", "dX", "dW", "dbias"}, res
    assert evaluate(rec, TOL, prov.name).passed


def test_audit_times_an_outside_kernel_through_the_bench_adapter(scratch: Path) -> None:
    from blockattn.audit.measure import timing_provider

    prov = providers.load_spec("mine=scratchkern:clean")
    assert timing_provider(prov.name, "plain") == "kernel:mine"
    assert timing_provider(prov.name, "rotary") == "kernel:mine@rotary"  # the fused rotary path
