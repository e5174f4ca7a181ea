"""Red-team patterns that exist only on a GPU: a CUDA fault that kills the context, and work
left on a side stream when the call returns. Run by the GPU tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.gpu


def _run(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "REDTEAM_NOTE": str(tmp / "note.txt")}
    return subprocess.run([sys.executable, "-m", "blockattn", *args], cwd=HERE, env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip


def _records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if x]


def test_cuda_fault_fails_its_case_and_the_next_is_judged(tmp_path: Path) -> None:
    out = tmp_path / "g"
    r = _run(["gate", "--provider", "f=adversaries:cuda_fault_once", "--out", str(out),
              "--max-cases", "3", "--fuzz", "0", "--no-contract", "--no-progress"], tmp_path)
    assert r.returncode == 1, r.stderr[-3000:]
    recs = _records(out)
    assert len(recs) == 3, r.stderr[-3000:]
    first = recs[0]["providers"]["f"]
    assert first["status"] == "error", first
    assert any(w in first["reason"] for w in ("CUDA", "device-side", "AcceleratorError",
                                              "worker")), first["reason"]  # fmt: skip
    # a fresh worker passed its device check and judged the others
    assert all(x["providers"]["f"]["status"] == "ok" for x in recs[1:]), recs[1:]
    assert all(x["verdict"]["passed"] for x in recs[1:])
    assert (out / "gate.md").is_file()


def test_side_stream_work_is_refused_by_name(tmp_path: Path) -> None:
    out = tmp_path / "g"
    r = _run(["gate", "--provider", "s=adversaries:side_stream", "--out", str(out),
              "--max-cases", "2", "--fuzz", "0", "--no-contract", "--no-progress"], tmp_path)
    assert r.returncode == 1, r.stderr[-3000:]
    text = (out / "gate.md").read_text()
    assert "in flight" in text or "beyond" in text, text[-3000:]
