"""A callable without block_attention's signature is refused once, up front, with one line and
exit 2 (issue 21, item 10); one that takes the arguments (or **kwargs) is accepted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from blockattn.providers import Supports
from blockattn.providers.external import signature_problem


def test_signature_problems_are_named() -> None:
    def bad(q, k, v, offsets, block_size, scale):
        return q

    def good(q, k, v, offsets, *, block_size, scale, sinu_pos, rotate_v):
        return q

    def loose(q, k, v, offsets, **kw):
        return q

    assert "sinu_pos" in signature_problem(bad, Supports())
    assert signature_problem(good, Supports()) is None
    assert signature_problem(loose, Supports(max_seq_len=True)) is None
    assert "max_seq_len" in signature_problem(good, Supports(max_seq_len=True))


@pytest.mark.parametrize("cmd", ["run", "gate"])
def test_the_cli_refuses_it_with_one_line_and_exit_2(tmp_path: Path, cmd: str) -> None:
    (tmp_path / "badsig.py").write_text("def attn(q, k, v, offsets, block_size, scale):\n"
                                        "    return q\n")  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "blockattn", cmd, "--provider", "badsig:attn",
                        "--tolerances", "v4", "--max-cases", "1", "--out", str(tmp_path / "o")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    errors = [x for x in r.stderr.splitlines() if "error:" in x]
    assert len(errors) == 1 and "cannot be called as (q, k, v, offsets" in errors[0], r.stderr
    assert not (tmp_path / "o" / "results.jsonl").exists()
