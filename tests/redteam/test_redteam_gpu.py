"""Red-team patterns that exist only on a GPU: a CUDA fault that kills the context, work left
on a side stream when the call returns, and answers replayed from a cache (timing attacks need a
device's clock and its physical floor). Run by the GPU tier."""

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


def test_side_stream_is_joined_by_autograd_in_the_gate(tmp_path: Path) -> None:
    """Forward and backward through autograd: the backward runs on the forward's stream and
    autograd joins it to the caller's, so the outputs are complete when the call returns and
    the gate judges them (correct; the attack is on timing, below)."""
    out = tmp_path / "g"
    r = _run(["gate", "--provider", "s=adversaries:side_stream", "--out", str(out),
              "--max-cases", "2", "--fuzz", "0", "--no-contract", "--no-progress"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]


def test_side_stream_timing_is_refused_by_name(tmp_path: Path) -> None:
    """The bench's forward under no_grad: the side stream is never joined, so the rows the
    worker gathers right after the timed calls are stale: the timed check fails by name (or
    the time is below the physical floor)."""
    out = tmp_path / "b"
    r = _run(["bench", "--smoke", "--out", str(out), "--no-sweeps", "--no-extras",
              "--no-projection", "--providers", "blockattn",
              "--provider", "streamy=adversaries:side_stream"], tmp_path)
    data = json.loads((out / "bench.json").read_text())
    rows = [m for m in data["measurements"] if m["provider"] == "streamy" and m["pass"] == "fwd"]
    assert rows, r.stderr[-3000:]
    for m in rows:
        # refused by name, or timed correctly: the batch's device-wide synchronise waited for
        # the side stream, so the time includes its 20M-cycle sleep (about 12 ms on an H200)
        refused = m["status"] in ("check_fail", "refused_impossible") and (
            "in flight" in m["note"] or "impossible" in m["note"])
        assert refused or m["ms"] >= 5.0, m
    ours = [m for m in data["measurements"] if m["provider"] == "blockattn"]
    assert ours and all(m["status"] == "ok" for m in ours), ours


def test_replayed_answers_are_refused_as_impossible(tmp_path: Path) -> None:
    """A kernel that replays its forward's answer for inputs it has seen: the bench's calls
    rotate between two input sets, both seen after the first calls, so every timed call is a
    lookup. Its answers are right (the spot checks pass); its time at shape P is below what
    moving the operator's bytes at the device's peak bandwidth takes: refused as impossible.
    blockattn's own rows beside it are not."""
    out = tmp_path / "b"
    r = _run(["bench", "--quick", "--no-sweeps", "--no-extras", "--no-projection", "--out",
              str(out), "--providers", "blockattn", "--cases", "P_D128,P_D64",
              "--provider", "cached=adversaries:replay_cache"], tmp_path)  # fmt: skip
    data = json.loads((out / "bench.json").read_text())
    rows = [m for m in data["measurements"] if m["provider"] == "cached" and m["pass"] == "fwd"]
    assert rows, r.stderr[-3000:]
    for m in rows:
        assert m["status"] == "refused_impossible" and "impossible" in m["note"], (
            {k: m.get(k) for k in ("case", "status", "ms", "note")}, r.stderr[-2000:])
    ours = [m for m in data["measurements"] if m["provider"] == "blockattn"]
    assert ours and all(m["status"] == "ok" for m in ours), ours
