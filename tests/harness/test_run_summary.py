"""summary.md of a run (issue 43, item 5): a PASS / FAIL headline first, and a legend of its
columns with one-line explanations of "headroom" and "max ulp"."""

from __future__ import annotations

from types import SimpleNamespace

from blockattn.report.summarize import run_summary_markdown

INFO = {"device": "cpu", "gpu": "none (cpu interpreter)"}
TOL = SimpleNamespace(released_as="v4.toml", label="v4, released (v4.toml)", path="v4.toml",
                      sha256="0" * 64)  # fmt: skip


def _v(passed: bool, skipped: bool = False) -> SimpleNamespace:
    return SimpleNamespace(case_id=f"c{id(object())}", passed=passed, skipped=skipped,
                           failures=[] if passed else ["wrong O"], warnings=[])  # fmt: skip


def _md(verdicts, tol=TOL, bad=(), checks=None) -> str:
    return run_summary_markdown(info=INFO, commit="abc1234", tol=tol, under_test="mine",
                                verdicts=verdicts, records=[], contract_md="### Contract",
                                contract_bad=list(bad), checks=checks)  # fmt: skip


def test_headline_pass() -> None:
    md = _md([_v(True), _v(True), _v(True, skipped=True)])
    assert md.splitlines()[0] == "# blockattn run: ✅ PASS"
    assert "2 judged case(s) passed" in md.splitlines()[2]


def test_headline_fail_says_why() -> None:
    md = _md([_v(True), _v(False)], bad=["contract violated: layout (x): y"])
    assert md.splitlines()[0] == "# blockattn run: ❌ FAIL"
    assert "1 of 2 judged case(s) failed; 1 contract violation(s)" in md.splitlines()[2]
    md = _md([_v(True, skipped=True)])
    assert md.splitlines()[0] == "# blockattn run: ❌ FAIL" and "zero cases judged" in md


def test_headline_not_judged_without_tolerances() -> None:
    md = _md([], tol=None)
    assert md.splitlines()[0] == "# blockattn run: NOT JUDGED"


def test_legend_explains_the_columns() -> None:
    md = _md([_v(True)])
    legend = md.split("<summary>What the columns mean</summary>")[1]
    for col in ("max err/floor", "max err/baseline", "NaN/Inf", "% correctly rounded",
                "max ulp", "headroom", "violations", "min SNR dB"):  # fmt: skip
        assert f"**{col}" in legend or col in legend, col
    assert "**1x** is within the bound" in legend
    assert "can read 1e12 on a correct kernel" in legend
