"""A --baseline of another device kind, tolerance version or corpus version (issue 41, item
5e): refused (exit 2, naming both sides) where the comparison is meaningless, warned otherwise."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from blockattn import cli
from blockattn.report import baseline
from blockattn.run import session

RUN = ["--max-cases", "2", "--fuzz", "0", "--no-selfcheck", "--no-contract", "--no-progress",
       "--tolerances", "v4"]  # fmt: skip
GATE = ["gate", "--tolerances", "v4", "--no-contract", "--report"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bc") / "run"
    assert cli.main(["run", "--out", str(out), *RUN]) == 0
    session.release_dir(out)
    return out


def _baseline(run_dir: Path, dst: Path, edit) -> Path:
    shutil.copytree(run_dir, dst, ignore=shutil.ignore_patterns(session.LOCK))
    rj = json.loads((dst / "report.json").read_text())
    for r in rj["cases"]:
        edit(r)
    (dst / "report.json").write_text(json.dumps(rj))
    return dst


def _gate(run_dir: Path, base: Path, tmp_path: Path, capsys) -> tuple[int, str]:
    d = tmp_path / "under"
    shutil.copytree(run_dir, d, ignore=shutil.ignore_patterns(session.LOCK))
    rc = cli.main([*GATE, str(d), "--baseline", str(base)])
    cap = capsys.readouterr()
    return rc, cap.out + cap.err


def test_same_kind_baseline_compares_silently(run_dir: Path, tmp_path: Path, capsys) -> None:
    base = _baseline(run_dir, tmp_path / "base", lambda r: None)
    rc, text = _gate(run_dir, base, tmp_path, capsys)
    assert rc == 0 and "not comparable" not in text and "⚠️ the baseline ran" not in text, text


def test_a_baseline_of_another_device_kind_is_refused(run_dir: Path, tmp_path: Path,
                                                      capsys) -> None:  # fmt: skip
    """A GPU baseline for a CPU run (the CPU tier), a CPU baseline for a GPU run (a GPU's)."""
    here = json.loads((run_dir / "report.json").read_text())["cases"][0]["device"]
    other = "cpu" if here == "cuda" else "cuda"
    base = _baseline(run_dir, tmp_path / "base", lambda r: r.update(device=other))
    rc, text = _gate(run_dir, base, tmp_path, capsys)
    assert rc == 2, text[-2000:]
    assert "not comparable" in text and f"ran on {other} and this run on {here}" in text, text


def test_another_tolerance_version_is_warned(run_dir: Path, tmp_path: Path, capsys) -> None:
    base = _baseline(run_dir, tmp_path / "base",
                     lambda r: r["tolerances"].update(version=3))  # fmt: skip
    rc, text = _gate(run_dir, base, tmp_path, capsys)
    assert rc == 0, text[-2000:]
    assert "judged by tolerances v3 and this run by v4" in text
    assert "judged by tolerances v3" in (tmp_path / "under" / "gate.md").read_text()


def test_another_gpu_or_corpus_version_is_warned() -> None:
    recs = {"a": {"case_id": "a", "device": "cuda", "tolerances": {"version": 5}}}
    here = {"device": "cuda", "gpu": "NVIDIA H100", "tolerances": [5], "corpus_version": 3}
    base = Path("/nonexistent/report.json")
    refuse, warn = baseline.check(base, recs, here, ["a"])
    assert refuse == [] and warn == []  # nothing recorded there to differ from
    meta_dir = Path(__file__).parent  # no report.json here: _meta_of gives {}
    assert baseline._meta_of(meta_dir) == {}
    there = {"device": "cuda", "gpu": "NVIDIA H200", "tolerances": [5], "corpus_version": 2}
    orig = baseline.side
    try:
        baseline.side = lambda records, meta: there  # the baseline's recorded side
        refuse, warn = baseline.check(base, recs, here, ["a"])
    finally:
        baseline.side = orig
    assert refuse == []
    assert any("NVIDIA H200 and this run on NVIDIA H100" in w for w in warn), warn
    assert any("corpus v2 and this run corpus v3" in w for w in warn), warn
