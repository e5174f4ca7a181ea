"""`gate --baseline OLD_DIR` compares the kernel under test with the baseline's kernel under test,
whatever either was called (issue 21, item 8), and says so when the names differ."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from blockattn import cli, providers

ARGS = ["--case", "edge-lengths-plain-bf16", "--no-contract", "--no-progress",
        "--tolerances", "v4"]  # fmt: skip


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="CPU tolerances (v4)")
def test_a_renamed_kernel_is_compared_by_role(tmp_path: Path, monkeypatch, capsys) -> None:
    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "okern.py").write_text((repo / "examples" / "outside_kernel.py").read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "okern", raising=False)
    try:
        old = tmp_path / "old"
        assert cli.main(["run", "--provider", "before=okern:clean", "--out", str(old),
                         "--corpus-only", *ARGS]) == 0  # fmt: skip
        capsys.readouterr()
        rc = cli.main(["gate", "--provider", "mine=okern:clean", "--baseline", str(old),
                       "--out", str(tmp_path / "g"), *ARGS])  # fmt: skip
        md = capsys.readouterr().out
        assert rc == 0, md[-3000:]
        assert "Regressions vs" in md and ": 0" in md.split("Regressions vs", 1)[1][:200]
        assert "baseline's kernel under test is ['before']" in md and "`mine`" in md
    finally:
        for n in ("before", "mine"):
            providers.unregister(n)
