"""Judged by an unreleased tolerance file (--allow-unreleased-tolerances): every output says
UNRELEASED (issue 41, item 5d): run's console, summary.md, report.json (a field), report.md,
report.html, gate.md's heading."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from blockattn import cli
from blockattn.judge import tolerances

V4 = tolerances.default_tolerance_dir() / "v4.toml"
ARGS = ["--max-cases", "1", "--fuzz", "0", "--no-contract", "--no-progress", "--no-selfcheck"]


def _unreleased(tmp_path: Path) -> Path:
    d = tmp_path / "tols"
    d.mkdir()
    f = d / "v4.toml"
    f.write_text(V4.read_text().replace("c = 2.0\n", "c = 3.0\n"))
    (d / "MANIFEST").write_text(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  v4.toml\n")
    assert tolerances.load(f).released_as is None
    return f


def test_every_output_of_a_run_says_unreleased(tmp_path: Path, capsys) -> None:
    f = _unreleased(tmp_path)
    out = tmp_path / "run"
    rc = cli.main(["run", "--tolerances", str(f), "--allow-unreleased-tolerances",
                   "--out", str(out), *ARGS])  # fmt: skip
    cap = capsys.readouterr()
    assert rc == 0, cap.err[-2000:]
    assert "(UNRELEASED)" in cap.err.split("blockattn run:")[1].splitlines()[0]
    summary = (out / "summary.md").read_text()
    assert "UNRELEASED" in summary.splitlines()[0], summary[:300]
    assert json.loads((out / "report.json").read_text())["meta"]["tolerances_released"] is False
    assert cli.main(["report", str(out)]) == 0
    assert "UNRELEASED" in (out / "report.md").read_text().splitlines()[0]
    html = (out / "report.html").read_text()
    assert "UNRELEASED tolerances)</h1>" in html and "UNRELEASED tolerance file" in html


def test_a_released_run_says_released(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert cli.main(["run", "--tolerances", "v4", "--out", str(out), *ARGS]) == 0
    capsys.readouterr()
    assert "UNRELEASED" not in (out / "summary.md").read_text()
    assert json.loads((out / "report.json").read_text())["meta"]["tolerances_released"] is True
    assert cli.main(["report", str(out)]) == 0
    assert "UNRELEASED" not in (out / "report.md").read_text()


def test_gate_md_heading_says_unreleased(tmp_path: Path, capsys) -> None:
    f = _unreleased(tmp_path)
    out = tmp_path / "gate"
    rc = cli.main(["gate", "--tolerances", str(f), "--allow-unreleased-tolerances",
                   "--out", str(out), *ARGS[:2], "--no-contract", "--no-progress"])  # fmt: skip
    md = capsys.readouterr().out
    assert rc == 0, md[-2000:]
    head = (out / "gate.md").read_text().splitlines()[0]
    assert head.startswith("## blockattn gate:") and "UNRELEASED" in head, head
    assert json.loads((out / "report.json").read_text())["meta"]["tolerances_released"] is False
    assert cli.main(["report", str(out)]) == 0
    assert "UNRELEASED" in (out / "report.md").read_text().splitlines()[0]
