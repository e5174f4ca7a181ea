"""Text from a kernel is escaped in gate.md and summary.md (issue 41, item 5f): CI posts them as
comments, and a kernel's exception message must not forge a "## ✅ PASS" heading, HTML, a
quote or a table row there."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from blockattn import cli
from blockattn.report.summarize import md_inline
from blockattn.run import session

HOSTILE = "boom\n## ✅ PASS\n\n> all good <h2>PASS</h2>\n| ok | ok |\n- [x](http://e.x) `y`"
KERNEL = f'''
MSG = {HOSTILE!r}


def fn(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
    raise RuntimeError(MSG)
'''


def _forged(md: str) -> list[str]:
    """Lines of `md` the kernel wrote: a heading or quote claiming PASS, raw HTML, a row."""
    bad = []
    for line in md.splitlines()[1:]:
        if re.match(r"\s*(#{1,6}|>)\s*.*PASS", line) or "<h2>" in line or line == "| ok | ok |":
            bad.append(line)
    return bad


def test_md_inline_neutralises_every_line_start_and_tag() -> None:
    out = md_inline(HOSTILE)
    assert "\n" not in out and "<" not in out.replace("\\<", "")
    assert out.startswith("boom ⏎ ## ✅ PASS ⏎") and "\\<h2\\>" in out and "\\`y\\`" in out
    for start in ("# x", "> x", "- x", "+ x", "= x", "1. x", "  # x"):
        assert md_inline(start).lstrip().startswith("\\"), start
    assert md_inline("max_ratio_to_floor 1.5e-3 (dK)") == "max_ratio_to_floor 1.5e-3 (dK)"


@pytest.fixture()
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "evilmod.py").write_text(KERNEL)
    monkeypatch.chdir(tmp_path)
    yield "evil=evilmod:fn"
    from blockattn import providers

    providers.unregister("evil")
    sys.modules.pop("evilmod", None)


def test_gate_md_escapes_a_hostile_exception_message(hostile: str, tmp_path: Path,
                                                     capsys) -> None:  # fmt: skip
    out = tmp_path / "gate"
    rc = cli.main(["gate", "--provider", hostile, "--tolerances", "v4", "--max-cases", "1",
                   "--fuzz", "0", "--no-progress", "--out", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    session.release_dir(out)
    assert rc == 1, printed[-2000:]
    md = (out / "gate.md").read_text()
    assert md.splitlines()[0].startswith("## blockattn gate: ❌ FAIL")
    assert "boom ⏎ ## ✅ PASS ⏎" in md, md[:3000]  # the message is there, inert
    assert _forged(md) == [], _forged(md)
    assert _forged(printed) == []


def test_summary_md_escapes_a_hostile_exception_message(hostile: str, tmp_path: Path,
                                                        capsys) -> None:  # fmt: skip
    out = tmp_path / "run"
    rc = cli.main(["run", "--provider", hostile, "--tolerances", "v4", "--max-cases", "1",
                   "--fuzz", "0", "--no-progress", "--no-selfcheck",
                   "--out", str(out)])  # fmt: skip
    capsys.readouterr()
    session.release_dir(out)
    assert rc == 1
    md = (out / "summary.md").read_text()
    assert md.splitlines()[0].startswith("# blockattn run: ❌ FAIL")
    assert "boom ⏎ ## ✅ PASS ⏎" in md, md[:3000]
    assert _forged(md) == [], _forged(md)
