"""Case selection and CLI hygiene: filters, shards + merge, validated options, resume, gate dirs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from blockattn import cli, providers
from blockattn.cases import plan, strategies
from blockattn.cases.plan import Selection
from blockattn.judge import tolerances

pytest.importorskip("oracles")
TOL = str(tolerances.latest_released(tolerances.default_tolerance_dir(), "cpu"))
FAST = ["--no-progress", "--tolerances", TOL, "--no-contract"]  # the battery: tests/contract


def _plan(**kw) -> list:
    base = dict(profile="ci", under_test_supports=providers.get("blockattn").supports, fuzz=12,
                seed=3)  # fmt: skip
    return plan.plan_specs("cpu", **{**base, **kw})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_filters_select_exactly_the_matching_cases(seed: int) -> None:
    every = _plan(seed=seed)
    sel = Selection(dtypes=("float16",), head_dims=(64,), variants=("plain", "rotary"))
    got = _plan(seed=seed, selection=sel)
    assert got and all(s.dtype == "float16" and s.D == 64 and s.variant != "projection"
                       for s in got)  # fmt: skip
    corpus_kept = [s for s in every if s.source == "corpus" and sel.keeps(s)]
    assert [s for s in got if s.source == "corpus"] == corpus_kept
    # The fuzz part is drawn from the restricted space: the full budget, all matching.
    assert sum(s.source == "fuzz" for s in got) == 12
    dist = _plan(seed=seed, corpus=False, selection=Selection(distributions=("tiny",)))
    assert len(dist) == 12 and {s.distribution for s in dist} == {"tiny"}


def test_fuzz_space_follows_the_kernels_supports_and_names_its_cases() -> None:
    specs = _plan(corpus=False, fuzz=60)
    assert {s.D for s in specs} == {64, 128}  # the CPU profile draws both head dims
    assert all(s.kvheads in (None, s.H) for s in specs)  # blockattn has no GQA: none drawn
    assert all(s.name.startswith("fuzz-s3-") for s in specs)
    assert len({s.name for s in specs}) == len(specs)
    eager = _plan(corpus=False, fuzz=60, under_test_supports=providers.get("eager").supports)
    assert any(s.kvheads not in (None, s.H) for s in eager)  # eager supports GQA: drawn
    none = _plan(corpus=False, selection=Selection(dtypes=("float32",)),
                 under_test_supports=providers.get("fa2").supports)  # fmt: skip
    assert none == []  # fa2 declares no fp32: nothing to draw


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_shards_are_disjoint_cover_the_plan_and_balance(n: int) -> None:
    every = _plan()
    parts = [_plan(selection=Selection(shard=(i, n))) for i in range(1, n + 1)]
    ids = [s.case_id for p in parts for s in p]
    assert sorted(ids) == sorted(s.case_id for s in every) and len(set(ids)) == len(ids)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_unknown_case_id_is_a_usage_error() -> None:
    with pytest.raises(ValueError, match="--case nope"):
        _plan(selection=Selection(cases=("nope",)))
    name = _plan()[0].name
    assert [s.name for s in _plan(selection=Selection(cases=(name,)))] == [name]


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["run", "--fuzz", "-3"], "argument --fuzz: must be >= 0"),
        (["run", "--seed", "x"], "argument --seed: expected an integer"),
        (["run", "--max-cases", "0"], "argument --max-cases: must be >= 1"),
        (["mutants", "--max-cases", "0"], "argument --max-cases: must be >= 1"),
        (["run", "--shard", "3/2"], "argument --shard"),
        (["run", "--shard", "1-2"], "argument --shard"),
        (["run", "--head-dim", "0"], "argument --head-dim"),
        (["run", "--dtype", "int8"], "argument --dtype: unknown dtype"),
        (["run", "--corpus-only", "--fuzz-only"], "not allowed with"),
        (["gate", "--tolerances", TOL, "--fuzz", "-1"], "argument --fuzz"),
    ],
)
def test_bad_numbers_exit_2_naming_the_option(argv: list[str], msg: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2 and msg in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["run", "--corpus-only", "--fuzz", "5"], "--corpus-only with --fuzz 5"),
        (["run", "--resume"], "--resume needs --out"),
        (["run", "--case", "no-such-case"], "--case no-such-case"),
        (["gate", "--tolerances", TOL, "--fuzz-only", "--fuzz", "0"], "--fuzz-only needs --fuzz"),
    ],
)
def test_conflicting_options_exit_2(argv: list[str], msg: str, capsys) -> None:
    assert cli.main([*argv, "--no-progress"]) == 2
    assert msg in capsys.readouterr().err


def test_version_names_package_commit_and_toolchain(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("blockattn ") and "torch" in out


def test_parser_imports_no_torch() -> None:
    # Importing torch (hence triton) before TRITON_INTERPRET is set freezes triton in compiled
    # mode on a CPU: every kernel then fails "Cannot call @triton.jit'd outside ... a kernel".
    code = "import sys; from blockattn.cli import build_parser; build_parser(); " \
           "print('torch' in sys.modules, 'triton' in sys.modules)"  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_resume_refuses_a_directory_run_with_other_options(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r"
    argv = ["run", "--out", str(out), "--case", "edge-lengths-plain-bf16", "--no-selfcheck", *FAST]
    assert cli.main(argv) == 0
    assert cli.main([*argv, "--resume"]) == 0  # same options: nothing new to run
    capsys.readouterr()
    assert cli.main([*argv, "--resume", "--seed", "4"]) == 2
    err = capsys.readouterr().err
    assert "other options" in err and "seed: 0 there, 4 now" in err
    assert cli.main([*argv, "--resume", "--dtype", "float16"]) == 2


def test_missing_tolerance_file_fails_loudly(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(tolerances, "latest_released", lambda *a, **k: None)
    assert cli.main(["run", "--case", "edge-lengths-plain-bf16", "--no-progress"]) == 2
    assert "no released tolerance file" in capsys.readouterr().err


def test_tolerance_files_ship_in_the_wheel(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path), str(repo)], capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    if p.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {p.stderr[-300:]}")
    import zipfile

    (whl,) = tmp_path.glob("blockattn-*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    released = tolerances.read_manifest(tolerances.default_tolerance_dir())
    assert released and "blockattn/tolerances/MANIFEST" in names
    assert {f"blockattn/tolerances/{n}" for n in released} <= names


def test_shard_runs_merge_into_one_verdict(tmp_path: Path, capsys) -> None:
    common = ["--corpus-only", "--variant", "plain", "--dtype", "float16", "--no-selfcheck", *FAST]
    d1, d2, m = tmp_path / "s1", tmp_path / "s2", tmp_path / "merged"
    assert cli.main(["run", "--out", str(d1), "--shard", "1/2", *common]) == 0
    capsys.readouterr()
    assert cli.main(["merge", str(d1), "--out", str(m)]) == 2
    assert "missing shard(s) 2/2" in capsys.readouterr().err
    assert cli.main(["run", "--out", str(d2), "--shard", "2/2", *common]) == 0
    assert cli.main(["merge", str(d1), str(d1), "--out", str(m)]) == 2  # the same shard twice
    assert cli.main(["merge", str(d1), str(d2), "--out", str(m)]) == 0
    merged = json.loads((m / "report.json").read_text())
    whole = _plan(fuzz=0, selection=Selection(variants=("plain",), dtypes=("float16",)))
    assert sorted(c["case_id"] for c in merged["cases"]) == sorted(s.case_id for s in whole)
    assert set(merged["meta"]["shards"]) == {"1/2", "2/2"}
    assert cli.main(["gate", "--report", str(m), "--tolerances", TOL, "--no-contract"]) == 0
    # A shard with other options does not belong to the same split.
    d3 = tmp_path / "s3"
    assert cli.main(["run", "--out", str(d3), "--shard", "2/2", "--seed", "9", *common]) == 0
    capsys.readouterr()
    assert cli.main(["merge", str(d1), str(d3), "--out", str(tmp_path / "m2")]) == 2
    assert "other options" in capsys.readouterr().err
    (d2 / "report.json").unlink()  # an unfinished (or killed) shard
    assert cli.main(["merge", str(d1), str(d2), "--out", str(tmp_path / "m3")]) == 2


def test_gate_dir_is_complete_and_regression_only_failures_get_reproducers(
    tmp_path: Path, capsys
) -> None:
    from harness_helpers import dk_bug

    providers.register("dkbug", dk_bug, accuracy_model="fp32-split-operands")
    try:
        base, out = tmp_path / "base", tmp_path / "gate"
        case = ["--case", "near-constant-fp16", "--no-contract", "--no-progress",
                "--tolerances", TOL]
        assert cli.main(["gate", "--out", str(base), *case]) == 0
        (base / "repro").mkdir()
        (base / "repro" / "stale.json").write_text("{}")  # left by an earlier gate
        capsys.readouterr()
        rc = cli.main(["gate", "--out", str(out), "--under-test", "dkbug", "--baseline",
                       str(base), *case])  # fmt: skip
        md = capsys.readouterr().out
        assert rc == 1
        rep = json.loads((out / "report.json").read_text())
        assert rep["meta"]["command"].startswith("blockattn gate") and rep["meta"]["commit"]
        assert rep["meta"]["tolerances_sha256"] == tolerances.load(TOL).sha256
        assert "replay" in md and list((out / "repro").glob("*.json"))
        # gating the base dir again clears the stale reproducer it does not own any more
        assert cli.main(["gate", "--report", str(base), *case[:-2], "--tolerances", TOL]) == 0
        assert not (base / "repro" / "stale.json").exists()
    finally:
        providers.unregister("dkbug")


def test_strategies_space_has_distributions_and_gqa_switch() -> None:
    sp = strategies.SPACES["ci"]
    assert sp.distributions == strategies.DISTRIBUTIONS and sp.gqa


def test_gate_over_an_outside_kernel_runs_only_it_and_its_baseline_and_regates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "okern.py").write_text((repo / "examples" / "outside_kernel.py").read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "okern", raising=False)
    out = tmp_path / "g"
    try:
        argv = ["--case", "edge-lengths-plain-bf16", "--no-contract", "--no-progress",
                "--tolerances", TOL]
        assert cli.main(["gate", "--provider", "okern:clean", "--out", str(out), *argv]) == 0
        rec = json.loads((out / "results.jsonl").read_text().splitlines()[0])
        # not the built-in kernel too: the kernel and this device's baseline only
        baseline = "fa2" if torch.cuda.is_available() else "eager"
        assert list(rec["providers"]) == ["clean", baseline]
        providers.unregister("clean")  # a later gate over the report needs no --provider:
        capsys.readouterr()  # the records say which kernel ran and how it declared itself
        assert cli.main(["gate", "--report", str(out), "--tolerances", TOL, "--no-contract"]) == 0
        assert "under test `clean`" in capsys.readouterr().out
    finally:
        providers.unregister("clean")
