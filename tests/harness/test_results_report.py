"""results.jsonl streaming: resume skips finished cases, torn lines survive, partial reports."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

from blockattn import cli
from blockattn.cases.spec import CaseSpec
from blockattn.pipeline import run_cases
from blockattn.report import report_json
from blockattn.run.results import ResultsWriter, load_records

pytest.importorskip("oracles")
# eager only: these tests are about the plumbing, not the kernel (keeps them ~1 s).
SPECS = [
    CaseSpec(seed=21, lengths=(65, 3), H=1, source="fuzz"),
    CaseSpec(seed=22, variant="rotary", B=3, max_len=80, sparsity=0.4, H=1, source="fuzz"),
    CaseSpec(seed=23, variant="projection", lengths=(0, 40), H=1, dtype="float16"),
]


def _run(out: Path, specs: list[CaseSpec], **kw) -> tuple[list[dict], list[str]]:
    seen: list[str] = []
    recs = run_cases(
        specs,
        out,
        provider_names=["eager"],
        under_test="eager",
        baseline="eager",
        progress=False,
        on_record=lambda r, _t: seen.append(r["case_id"]),
        **kw,
    )
    return recs, seen


def test_resume_runs_only_unfinished_cases(tmp_path: Path) -> None:
    _, first = _run(tmp_path, SPECS[:2])
    assert first == [s.case_id for s in SPECS[:2]]
    with pytest.raises(ValueError, match="--resume"):
        _run(tmp_path, SPECS)  # refusing to silently append a second run
    recs, second = _run(tmp_path, SPECS, resume=True)
    assert second == [SPECS[2].case_id]
    assert sorted(r["case_id"] for r in recs) == sorted(s.case_id for s in SPECS)
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3  # append-only: one line per finished case, nothing rewritten


def test_torn_last_line_is_skipped_and_isolated(tmp_path: Path) -> None:
    _run(tmp_path, SPECS[:1])
    with open(tmp_path / "results.jsonl", "a") as fh:
        fh.write('{"case_id": "half-writ')  # the run was killed mid-write
    assert [r["case_id"] for r in load_records(tmp_path)] == [SPECS[0].case_id]
    with ResultsWriter(tmp_path) as w:  # a resumed writer starts on a fresh line
        w.write({"case_id": "next", "providers": {}, "spec": {}})
    assert [r["case_id"] for r in load_records(tmp_path)] == [SPECS[0].case_id, "next"]


def test_report_renders_partial_results(tmp_path: Path, capsys) -> None:
    _run(tmp_path, SPECS[:2])
    with open(tmp_path / "results.jsonl", "a") as fh:
        fh.write('{"case_id": "half-writ')  # killed mid-write: the note must say so
    assert not (tmp_path / "report.json").exists()  # run "still going"
    assert cli.main(["report", str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text()
    assert "partial" in md and "| eager | plain | bfloat16 | O | 1 |" in md
    assert "NOT JUDGED" in md.splitlines()[0]  # no tolerance file: no verdict, never PASS
    if importlib.util.find_spec("matplotlib") is not None:  # optional: plots only with it
        # explicit lengths only: no sparsity to plot against, so no empty sparsity plot
        for name in ("err_vs_length", "err_vs_tokens", "err_per_dtype_tensor"):
            png = tmp_path / "plots" / f"{name}.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "report.html").read_text()
    assert "<table class='bounds'>" in page and "<b>Partial</b>" in page
    out, err = capsys.readouterr()
    assert "(partial)" in out
    assert "skipped 1 torn line(s)" in err and "line 3" in err


def test_report_renders_without_matplotlib(tmp_path: Path, monkeypatch, capsys) -> None:
    _run(tmp_path, SPECS[:1])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` -> ImportError
    assert cli.main(["report", str(tmp_path)]) == 0
    assert "| eager | plain | bfloat16 | O | 1 |" in (tmp_path / "report.md").read_text()
    assert "<table class='bounds'>" in (tmp_path / "report.html").read_text()
    assert not list(tmp_path.glob("plots/*.png"))
    capsys.readouterr()


def test_report_leaves_summary_and_gate_md_alone(tmp_path: Path, capsys) -> None:
    """`blockattn report` writes report.md; the run's summary.md (provenance, counts, oracle
    self-check) and the gate's gate.md are records of their own and stay byte for byte."""
    _run(tmp_path, SPECS[:1])
    rng = random.Random(7)
    mine = {n: f"# {n} {rng.random()}\n" for n in ("summary.md", "gate.md")}
    for n, text in mine.items():
        (tmp_path / n).write_text(text)
    assert cli.main(["report", str(tmp_path)]) == 0
    for n, text in mine.items():
        assert (tmp_path / n).read_text() == text, n
    assert (tmp_path / "report.md").read_text().startswith("# blockattn verification report")
    capsys.readouterr()


@pytest.mark.parametrize(
    ("files", "partial"),
    [((), True), (("gate.md",), False), (("report.json",), False),
     (("gate.md", "report.json"), False)],
)  # fmt: skip
def test_partial_means_neither_report_json_nor_gate_md(
    tmp_path: Path, capsys, files: tuple[str, ...], partial: bool
) -> None:
    _run(tmp_path, SPECS[:1])
    if "report.json" in files:
        report_json.write_report_json(tmp_path, load_records(tmp_path), {"commit": "abc"})
    if "gate.md" in files:
        (tmp_path / "gate.md").write_text("## blockattn gate: \u2705 PASS\n")
    assert cli.main(["report", str(tmp_path)]) == 0
    assert ("(partial)" in capsys.readouterr().out) is partial
    assert ("<b>Partial</b>" in (tmp_path / "report.html").read_text()) is partial


def test_report_on_missing_dir_is_exit_2(tmp_path: Path) -> None:
    assert cli.main(["report", str(tmp_path / "nothing")]) == 2


def test_records_are_strict_json(tmp_path: Path) -> None:
    _run(tmp_path, SPECS[:1])
    line = (tmp_path / "results.jsonl").read_text().splitlines()[0]
    rec = json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert rec["providers"]["eager"]["tensors"]["dQ"]["worst"]["token"] >= 0
