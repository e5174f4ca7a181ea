"""A kernel wrong everywhere (issue 43, item 5): the gate says first that it fails the clean
cases, and reports layout violations as a layout bug only where the clean layout passed."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from blockattn import cli
from blockattn.report import triage
from blockattn.run import session

WRONG = '''
import blockattn


def fn(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    return 1.1 * blockattn.block_attention(q, k, v, offsets, block_size=block_size, scale=scale,
                                           sinu_pos=sinu_pos, rotate_v=rotate_v)
'''


def _c(prop: str, probe: str, status: str, detail: str = "") -> dict:
    return {"property": prop, "probe": probe, "status": status, "detail": detail,
            **({"replay": f"blockattn contract --only {probe}"} if status == "FAIL" else {})}


def _bad(checks: list[dict]) -> list[str]:
    return [f"contract violated: {c['property']} ({c['probe']}): {c['detail']}  "
            f"[replay: {c['replay']}]" for c in checks if c["status"] == "FAIL"]


def test_layout_violations_fold_when_the_clean_layout_fails_too() -> None:
    checks = [_c("inputs-untouched", "layout-padded", "pass"),
              _c("layout", "layout-padded", "FAIL", "O: 12988 elements beyond"),
              *[_c("layout", f"layout-{x}", "FAIL", "O: 6676 elements beyond")
                for x in ("storage-offset", "qkv-packed", "head-strided", "mixed-1")],
              _c("containment", "containment-last", "FAIL", "NaN outside")]  # fmt: skip
    lines = triage.contract_lines(checks, _bad(checks))
    assert len(lines) == 2, lines
    assert lines[0].startswith("contract: 5 layout probe(s) fail (layout-padded, ")
    assert "not a layout bug" in lines[0] and "O: 12988" in lines[0]
    assert lines[1].startswith("contract violated: containment (containment-last)")


def test_a_layout_violation_where_the_clean_layout_passes_is_a_layout_bug() -> None:
    checks = [_c("layout", "layout-padded", "pass"),
              _c("layout", "layout-head-strided", "FAIL", "dK: 12 elements beyond")]
    bad = _bad(checks)
    assert triage.contract_lines(checks, bad) == bad


def test_clean_cases_line_only_when_judged_cases_fail() -> None:
    v = SimpleNamespace
    assert triage.clean_cases_line([v(skipped=False, passed=True)]) is None
    line = triage.clean_cases_line([v(skipped=False, passed=False), v(skipped=False, passed=True),
                                    v(skipped=True, passed=True)])  # fmt: skip
    assert line and line.startswith("the kernel fails the clean cases: 1 of 2 judged")


@pytest.fixture()
def wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "wrongmod.py").write_text(WRONG)
    monkeypatch.chdir(tmp_path)
    yield "wrong=wrongmod:fn"
    from blockattn import providers

    providers.unregister("wrong")
    sys.modules.pop("wrongmod", None)


def test_gate_says_first_that_the_clean_cases_fail(wrong: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "g"
    rc = cli.main(["gate", "--provider", wrong, "--tolerances", "v4", "--max-cases", "1",
                   "--fuzz", "0", "--no-progress", "--no-contract", "--out", str(out)])  # fmt: skip
    capsys.readouterr()
    session.release_dir(out)
    assert rc == 1
    reasons = [x for x in (out / "gate.md").read_text().splitlines() if x.startswith("- ❌")]
    assert reasons[0].startswith("- ❌ the kernel fails the clean cases: 1 of 1 judged"), reasons
