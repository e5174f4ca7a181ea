"""Tolerance files: schema validation, lookup, CLI exit 2 on bad files, manifest immutability."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from harness_helpers import TOL_DIR, minimal_doc, write_doc

from blockattn import cli
from blockattn.judge import tolerances


def test_minimal_document_loads_and_looks_up(tmp_path: Path) -> None:
    doc = minimal_doc(min_snr_db=30.0)
    doc["rules"]["blockattn"]["bfloat16"]["O"]["arch"] = {"sm_90": {"max_ratio_to_floor": 9.0}}
    tol = tolerances.load(write_doc(tmp_path / "v7.toml", doc))
    assert tol.rule("blockattn", "bfloat16", "O", None)["max_ratio_to_floor"] == 4.0
    assert tol.rule("blockattn", "bfloat16", "O", "sm_90")["max_ratio_to_floor"] == 9.0
    assert tol.rule("blockattn", "bfloat16", "O", "sm_90")["min_snr_db"] == 30.0
    assert tol.rule("blockattn", "float16", "O", None) is None
    assert tol.regression["max_growth"] == 1.25


BAD = {
    "not toml": "this is [not toml",
    "missing rules": None,
    "negative bound": ("max_ratio_to_floor", -1.0),
    "unknown field": ("max_ratio_to_flor", 3.0),
    "string bound": ("max_ratio_to_floor", "3"),
    "pct over 100": ("max_pct_over_tol", 120.0),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_malformed_files_are_rejected_with_exit_2(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "v7.toml"
    bad = BAD[kind]
    if isinstance(bad, str):
        path.write_text(bad)
    else:
        doc = minimal_doc()
        if bad is None:
            del doc["rules"]
        else:
            doc["rules"]["blockattn"]["bfloat16"]["O"][bad[0]] = bad[1]
        write_doc(path, doc)
    with pytest.raises(tolerances.ToleranceError):
        tolerances.load(path)
    assert cli.main(["gate", "--tolerances", str(path), "--report", str(tmp_path)]) == 2
    assert "error" in capsys.readouterr().err


def test_version_must_match_file_name(tmp_path: Path) -> None:
    with pytest.raises(tolerances.ToleranceError, match="does not match"):
        tolerances.load(write_doc(tmp_path / "v3.toml", minimal_doc()))


def test_missing_file_is_exit_2(tmp_path: Path) -> None:
    assert cli.main(["gate", "--tolerances", str(tmp_path / "v9.toml")]) == 2


def test_released_tolerance_files_are_unchanged() -> None:
    """Released files are immutable: edit -> this fails. Add tolerances/vN+1.toml instead."""
    manifest = tolerances.read_manifest(TOL_DIR)
    assert manifest, "blockattn/tolerances/MANIFEST lists no released file"
    assert tolerances.check_manifest(TOL_DIR) == []
    for name in manifest:
        tol = tolerances.load(TOL_DIR / name)
        assert tol.data["status"] == "released"


def test_manifest_detects_an_edit_and_gate_refuses(tmp_path: Path) -> None:
    f = write_doc(tmp_path / "v7.toml", {**minimal_doc(), "status": "released"})
    tolerances.release(f)
    assert tolerances.check_manifest(tmp_path) == []
    with pytest.raises(tolerances.ToleranceError, match="already released"):
        tolerances.release(f)
    f.write_text(f.read_text().replace("4.0", "40.0"))  # "just loosen it a bit"
    problems = tolerances.check_manifest(tmp_path)
    assert len(problems) == 1 and "immutable" in problems[0]
    assert cli.main(["gate", "--tolerances", str(f), "--report", str(tmp_path)]) == 2


def test_manifest_format_is_sha256sum_compatible() -> None:
    for line in (TOL_DIR / "MANIFEST").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            sha, name = line.split()
            assert hashlib.sha256((TOL_DIR / name).read_bytes()).hexdigest() == sha
