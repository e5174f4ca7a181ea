"""`blockattn false-alarms`: the gate's plan over many fuzz seeds on the unmodified kernels.

The quick test checks the command end to end on two tiny seeds; the slow one is the issue's
acceptance check (20 seeds, zero failures) and is what `blockattn false-alarms` prints on a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blockattn import cli


def _run(tmp_path: Path, *argv: str) -> tuple[int, dict]:
    rc = cli.main(["false-alarms", "--no-progress", "--out", str(tmp_path), *argv])
    return rc, json.loads((tmp_path / "false_alarms.json").read_text())


def test_two_seeds_report_one_gate_command_per_seed(tmp_path: Path) -> None:
    rc, rep = _run(tmp_path, "--seeds", "2", "--fuzz", "1", "--no-corpus", "--first-seed", "7")
    assert [r["seed"] for r in rep["seeds"]] == [7, 8]
    assert all(r["cases"] == 1 for r in rep["seeds"])
    assert all("blockattn gate" in r["gate_command"] and "--seed" in r["gate_command"]
               for r in rep["seeds"])  # fmt: skip
    assert rc == (1 if rep["failures"] else 0)


@pytest.mark.parametrize("flag", ["--seeds", "--fuzz"])
def test_non_positive_counts_are_usage_errors(flag: str, capsys) -> None:
    assert cli.main(["false-alarms", flag, "0"]) == 2
    assert flag in capsys.readouterr().err


def test_gate_rejects_negative_fuzz(capsys) -> None:
    tol = Path(__file__).resolve().parents[2] / "blockattn" / "tolerances" / "v1.toml"
    with pytest.raises(SystemExit) as e:  # argparse: exit 2 naming the option
        cli.main(["gate", "--tolerances", str(tol), "--fuzz", "-1"])
    assert e.value.code == 2 and "--fuzz" in capsys.readouterr().err


@pytest.mark.slow
# v1's CPU false alarms (seeds 100, 116) ended with v4, the newest released CPU file: the
# strict xfail that recorded them now passed (2026-11-23: 0 failed over seeds 100-119).
def test_gate_never_fails_on_unmodified_code_over_20_seeds(tmp_path: Path) -> None:
    rc, rep = _run(tmp_path, "--seeds", "20")
    assert rep["failures"] == [] and rc == 0, json.dumps(rep["failures"], indent=1)
