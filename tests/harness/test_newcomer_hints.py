"""Hints for a newcomer's typos (issue 43, item 5): `--tolerances v9` lists the shipped files,
a mistyped provider callable or name gets a "did you mean", and a CPU run judged by a GPU
tolerance file (or the reverse) gets a note."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from blockattn import cli, providers
from blockattn.commands._options import load_tolerances
from blockattn.judge import tolerances


def test_an_unknown_version_lists_the_shipped_ones(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["gate", "--tolerances", "v9", "--report", "nowhere"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "no tolerance file v9 ships with blockattn; shipped: " in err, err
    assert "v5 (released, cuda)" in err and "v4 (released, cpu)" in err, err
    assert "v4 (released, cpu)" in err
    assert tolerances.resolve_path("v4") == tolerances.default_tolerance_dir() / "v4.toml"
    with pytest.raises(ValueError, match="shipped: "):  # a ValueError too, for non-CLI callers
        tolerances.resolve_path("v99.toml")


def test_a_mistyped_callable_gets_did_you_mean(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "hintmod.py").write_text(
        "def block_attention(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):\n"
        "    return q\n"
    )
    monkeypatch.chdir(tmp_path)
    try:
        with pytest.raises(ValueError, match=r"did you mean 'block_attention'\?"):
            providers.load_spec("mine=hintmod:block_atention")
    finally:
        sys.modules.pop("hintmod", None)
    with pytest.raises(ValueError, match=r"did you mean 'eager'\?"):
        providers.load_spec("eagre")


def test_a_gpu_file_on_a_cpu_run_is_noted(capsys) -> None:
    ns = argparse.Namespace(tolerances=tolerances.resolve_path("v5"), no_tolerances=False,
                            allow_unreleased_tolerances=False)  # fmt: skip
    load_tolerances(ns, "cpu")
    err = capsys.readouterr().err
    assert "calibrated on cuda and these cases run on cpu" in err, err
    cpu = tolerances.latest_released(tolerances.default_tolerance_dir(), device="cpu")
    assert f"the newest released file for cpu is {cpu.stem}" in err
    ns.tolerances = tolerances.resolve_path("v4")
    load_tolerances(ns, "cpu")
    assert "calibrated on" not in capsys.readouterr().err
