"""The gate end to end: passes on the real kernel, fails (exit 1) on planted bugs, on an
impossibly tight tolerance file and on a regression vs an earlier report; exit 2 on bad config.

One module-scoped run evaluates a few corpus cases with the kernel, eager and the planted-bug
providers side by side (same inputs); each test then gates that run with a different
provider under test / tolerance file.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from harness_helpers import TOL_DIR, dk_bug, nan_rows_bug, nomask_bug, retarget, write_doc

from blockattn import cli, providers
from blockattn.cases.corpus import load_corpus
from blockattn.judge import tolerances
from blockattn.pipeline import run_cases
from blockattn.run import isolated

# Judge with the newest tolerance file calibrated on this test's device (cpu | cuda).
_TOL_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

pytest.importorskip("oracles")
PLANTED = {"bug-dk": dk_bug, "bug-nomask": nomask_bug, "bug-nanrow": nan_rows_bug}
# Corpus cases with partial blocks, both dtypes and all variants (keeps the run ~30 s on CPU).
CASES = (
    "edge-lengths-plain-bf16",
    "edge-lengths-rotary-fp16",
    "projection-bf16",
    "negative-rows-bf16",
)


def _latest() -> Path:
    """This module tests the schema-1 (whole-tensor) path: the last schema-1 file of the device.
    The schema-2 (elementwise) gate is tested in test_gate_elementwise.py."""
    p = TOL_DIR / {"cpu": "v1.toml", "cuda": "v2.toml"}[_TOL_DEVICE]
    assert tolerances.load(p).schema == 1
    return p


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for name, fn in PLANTED.items():
        providers.register(name, fn)
    specs = [s for s in load_corpus(tiers=("cpu",)) if s.name in CASES]
    assert len(specs) == len(CASES)
    out = tmp_path_factory.mktemp("gate-run")
    try:
        with isolated.session():  # the kernel under test runs in a worker, as in the CLI
            run_cases(
                specs,
                out,
                provider_names=["blockattn", "eager", *PLANTED],
                under_test="blockattn",
                baseline="eager",
                progress=False,
            )
    finally:
        for name in PLANTED:
            providers.unregister(name)
    return out


def _gate(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    # the battery: tests/contract; hand-made (unreleased) tolerance files on purpose here
    rc = cli.main(["gate", "--no-contract", "--allow-unreleased-tolerances", *args])
    return rc, capsys.readouterr().out


def test_gate_passes_on_the_real_kernel(run_dir: Path, capsys) -> None:
    rc, out = _gate(["--tolerances", str(_latest()), "--report", str(run_dir)], capsys)
    assert rc == 0, out
    assert "PASS" in out and "failed 0" in out


@pytest.mark.parametrize(
    ("provider", "expect"),
    [("bug-dk", "dK"), ("bug-nomask", "O"), ("bug-nanrow", "NaN/Inf")],
)
def test_gate_fails_on_planted_bug(
    provider: str, expect: str, run_dir: Path, tmp_path: Path, capsys
) -> None:
    # Same bounds as the kernel's, so only the planted bug can make it fail.
    doc = retarget(tolerances.load(_latest()).data, provider)
    tol = write_doc(tmp_path / f"v{doc['version']}.toml", doc)
    rc, out = _gate(["--tolerances", str(tol), "--report", str(run_dir)], capsys)
    assert rc == 1, out
    assert "FAIL" in out and expect in out.split("### Failures")[1]
    assert "replay: `blockattn replay" in out
    assert list((run_dir / "repro").glob("*.json"))


def test_dk_bug_fails_only_on_dk(run_dir: Path, tmp_path: Path) -> None:
    from blockattn.judge import verdict
    from blockattn.run.results import load_records

    tol = tolerances.Tolerances(None, retarget(tolerances.load(_latest()).data, "bug-dk"))
    tol.rules = tol.data["rules"]
    missed = []
    for rec in load_records(run_dir):
        v = verdict.evaluate(rec, tol, "bug-dk")
        if v.passed and rec["spec"]["variant"] == "projection" and rec["device"] == "cuda":
            missed.append(rec["case_id"])
            continue
        assert not v.passed
        assert all(" dK:" in f or " dW:" in f for f in v.failures), v.failures
    if missed:
        # Measured on an H200 (2026-11-22): tolerances v2 bounds projection dW at 5.5x the floor
        # and 33 dB SNR (p99.9 x 3 over few projection cases), while blockattn's dW sits at
        # ~1.2x / 48 dB; a 2^-6 relative dW error (~4x, ~36 dB) passes. Needs a recalibrated
        # CUDA file with more projection cases; until then this is a known, visible gap.
        pytest.xfail(f"v2 misses a 2^-6 dW scaling on projection cases {missed}")


def test_gate_fails_on_impossibly_tight_tolerances(run_dir: Path, tmp_path: Path, capsys) -> None:
    doc = copy.deepcopy(tolerances.load(_latest()).data)
    for by_t in doc["rules"]["blockattn"].values():
        for rule in by_t.values():
            rule["max_ratio_to_floor"] = 1e-3  # below one rounding: nothing can pass
    doc["status"] = "proposed"
    tol = write_doc(tmp_path / f"v{doc['version']}.toml", doc)
    rc, out = _gate(["--tolerances", str(tol), "--report", str(run_dir)], capsys)
    assert rc == 1 and "max_abs/floor" in out


def test_gate_flags_regression_vs_an_earlier_report(run_dir: Path, tmp_path: Path, capsys) -> None:
    # The kernel's errors sit below min_ratio_to_floor (2 roundings), where v1 ignores growth;
    # lower that threshold so the 4x growth below must be reported.
    doc = copy.deepcopy(tolerances.load(_latest()).data)
    doc["regression"] = {"max_growth": 1.25, "min_ratio_to_floor": 1e-3}
    doc["status"] = "proposed"
    tol = write_doc(tmp_path / f"v{doc['version']}.toml", doc)
    # Earlier report in which the kernel was 4x more accurate on every tensor.
    old = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    for rec in old:
        for m in rec["providers"]["blockattn"]["tensors"].values():
            m["ratio_to_floor"] /= 4
    base = tmp_path / "report.json"
    base.write_text(json.dumps({"cases": old}))
    rc, out = _gate(
        ["--tolerances", str(tol), "--report", str(run_dir), "--baseline", str(base)], capsys
    )
    assert rc == 1, out
    n_reg = int(out.split("### Regressions")[1].split(":")[1].split()[0])
    assert n_reg == sum(len(r["providers"]["blockattn"]["tensors"]) for r in old)
    # The run as its own baseline: nothing regressed, the gate passes.
    rc2, out2 = _gate(
        ["--tolerances", str(tol), "--report", str(run_dir), "--baseline", str(run_dir)], capsys
    )
    assert rc2 == 0 and "Regressions vs" in out2, out2


def test_gate_usage_errors_are_exit_2(run_dir: Path, tmp_path: Path, capsys) -> None:
    assert (
        cli.main(["gate", "--tolerances", str(_latest()), "--report", str(tmp_path / "nope")]) == 2
    )
    with pytest.raises(SystemExit) as exc:
        cli.main(["gate", "--max-cases", "0"])  # argparse exits 2 naming the option
    assert exc.value.code == 2
    assert "--max-cases" in capsys.readouterr().err
