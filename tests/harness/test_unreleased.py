"""Fail closed on a tolerance file the package cannot vouch for (issue 21, item 1): released
means "these bytes are in the MANIFEST shipped inside the package", whatever folder the file
sits in; anything else is refused unless the user passes --allow-unreleased-tolerances, and
is then named UNRELEASED everywhere."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from blockattn import cli
from blockattn.judge import tolerances

V4 = tolerances.default_tolerance_dir() / "v4.toml"
ARGS = ["--max-cases", "1", "--no-contract", "--no-progress"]


def _loosened(tmp_path: Path) -> Path:
    """v4 with every model constant raised to c = 2000, in a folder whose own MANIFEST lists it
    (a folder must not vouch for itself)."""
    d = tmp_path / "tols"
    d.mkdir()
    text = V4.read_text().replace("c = 2.0\n", "c = 2000.0\n")
    assert text.count("c = 2000.0") >= 3
    f = d / "v4.toml"
    f.write_text(text)
    (d / "MANIFEST").write_text(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  v4.toml\n")
    return f


def test_a_loosened_copy_is_refused_with_exit_2_naming_the_flag(tmp_path, capsys) -> None:
    f = _loosened(tmp_path)
    for cmd in ("gate", "run"):
        rc = cli.main([cmd, "--tolerances", str(f), "--out", str(tmp_path / cmd), *ARGS])
        err = capsys.readouterr().err
        assert rc == 2, err
        assert "not released" in err and "--allow-unreleased-tolerances" in err, err
    tol = tolerances.load(f)
    assert tol.released_as is None and "UNRELEASED" in tol.label
    with pytest.raises(tolerances.ToleranceError, match="not released"):
        tolerances.require_released(tol, allow=False)


def test_with_the_flag_it_judges_and_every_report_says_unreleased(tmp_path, capsys) -> None:
    f = _loosened(tmp_path)
    out = tmp_path / "g"
    rc = cli.main(["gate", "--tolerances", str(f), "--allow-unreleased-tolerances",
                   "--out", str(out), *ARGS])  # fmt: skip
    md = capsys.readouterr().out
    assert rc == 0, md
    assert "UNRELEASED" in md and "UNRELEASED" in (out / "gate.md").read_text()


def test_a_byte_identical_copy_is_that_release(tmp_path, capsys) -> None:
    copy = tmp_path / "elsewhere" / "mine.toml"
    copy.parent.mkdir()
    shutil.copy(V4, copy)
    tol = tolerances.load(copy)
    assert tol.released_as == "v4.toml" and "released (v4.toml)" in tol.label
    rc = cli.main(["gate", "--tolerances", str(copy), "--out", str(tmp_path / "g"), *ARGS])
    assert rc == 0, capsys.readouterr().out[-2000:]


def test_a_proposed_file_is_unreleased() -> None:
    v3 = tolerances.default_tolerance_dir() / "v3.toml"
    assert tolerances.load(v3).released_as is None


def test_gate_without_tolerances_takes_the_newest_released_for_the_device(tmp_path, capsys):
    rc = cli.main(["gate", "--out", str(tmp_path / "g"), *ARGS])
    err = capsys.readouterr().err
    assert rc == 0
    newest = tolerances.latest_released(tolerances.default_tolerance_dir(), device="cpu"
                                        if not __import__("torch").cuda.is_available()
                                        else "cuda")  # fmt: skip
    assert f"tolerances: {newest}" in err and "released" in err
