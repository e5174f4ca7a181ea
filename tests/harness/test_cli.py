"""`run` and `replay` end to end on CPU, and the environment plumbing (xdist GPU pin)."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
import torch
from harness_helpers import TOL_DIR, dump_toml

from blockattn import cli
from blockattn.cases.corpus import load_corpus
from blockattn.judge import tolerances
from blockattn.run import env

# Judge with the newest tolerance file calibrated on this test's device (cpu | cuda).
_TOL_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

pytest.importorskip("oracles")


def test_run_writes_a_report_directory(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    rc = cli.main(
        [
            "run",
            "--out",
            str(out),
            "--max-cases",
            "2",
            "--fuzz",
            "0",
            "--no-progress",
            "--no-selfcheck",
            "--no-contract",  # the battery is tested in tests/contract (CI time)
        ]
    )
    assert rc == 0, capsys.readouterr()
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    rep = json.loads((out / "report.json").read_text())
    assert rep["meta"]["device"] in ("cpu", "cuda") and len(rep["cases"]) == 2
    assert all(c["verdict"]["passed"] for c in rep["cases"])
    assert "blockattn" in (out / "summary.md").read_text()
    # --resume on a finished directory runs nothing new.
    assert (
        cli.main(
            [
                "run",
                "--out",
                str(out),
                "--max-cases",
                "2",
                "--fuzz",
                "0",
                "--resume",
                "--no-progress",
                "--no-selfcheck",
                "--no-contract",
            ]
        )
        == 0
    )
    assert len((out / "results.jsonl").read_text().splitlines()) == 2


def test_failures_write_a_reproducer_and_replay_reproduces(tmp_path: Path, capsys) -> None:
    newest = tolerances.latest_released(TOL_DIR, device=_TOL_DEVICE)
    doc = copy.deepcopy(tolerances.load(newest).data)
    # An impossibly tight model: no rounding anywhere but the store, so only a correctly
    # rounded output passes (blockattn leaves ~0.2 % of elements off).
    model = doc["models"][doc["rules"]["blockattn"]["model"]]
    model["u"] = {k: "0" for k in model["u"]}
    model["eta"] = {k: "0" for k in model["eta"]}
    model["c"] = 1.0
    doc["status"] = "proposed"
    (tmp_path / "tol").mkdir()  # own dir: no MANIFEST there, so no immutability clash
    tight = tmp_path / "tol" / f"v{doc['version']}.toml"
    tight.write_text(dump_toml(doc))
    out = tmp_path / "run"
    rc = cli.main(
        [
            "run",
            "--out",
            str(out),
            "--max-cases",
            "1",
            "--fuzz",
            "0",
            "--tolerances",
            str(tight),
            "--allow-unreleased-tolerances",
            "--no-progress",
            "--no-selfcheck",
            "--no-contract",  # the battery is tested in tests/contract (CI time)
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1
    repro = next((out / "repro").glob("*.json"))
    assert f"replay: blockattn replay {repro}" in err
    assert json.loads(repro.read_text())["spec"] == load_corpus(tiers=("cpu",))[0].to_dict()
    assert cli.main(["replay", str(repro)]) == 2  # the tight file it names is not released
    assert "not released" in capsys.readouterr().err
    # still fails with the tight file it names
    assert cli.main(["replay", str(repro), "--allow-unreleased-tolerances"]) == 1
    assert "FAIL" in capsys.readouterr().out
    latest = str(tolerances.latest_released(TOL_DIR, device=_TOL_DEVICE))
    assert cli.main(["replay", str(repro), "--tolerances", latest]) == 0
    assert cli.main(["replay", str(tmp_path / "missing.json")]) == 2


def test_unknown_provider_is_a_usage_error(tmp_path: Path) -> None:
    assert cli.main(["run", "--out", str(tmp_path), "--providers", "nope", "--fuzz", "0"]) == 2


def test_xdist_worker_is_pinned_to_one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    monkeypatch.setattr("torch.cuda.is_initialized", lambda: False)
    assert env.pin_xdist_worker_gpu() == "5"  # gw3 -> 3 % 2 -> second visible GPU
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert env.pin_xdist_worker_gpu() is None


def test_interpreter_is_on_when_there_is_no_gpu(device: str) -> None:
    if device == "cpu":
        assert os.environ.get("TRITON_INTERPRET") == "1"
        from blockattn.kernels import attention

        assert attention.INTERPRET
