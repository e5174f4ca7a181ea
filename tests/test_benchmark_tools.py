"""The benchmark scripts that claims rest on: bench_medians.py (medians of several bench runs,
known answers and its refusals) and sass_lines.py (per-line SASS counts of a CPU build)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _bench(d: Path, ms: dict[tuple[str, str, str], float], tbps: float = 4.0,
           kind: str = "nvidia-h200", errors: list | None = None) -> Path:
    d.mkdir(parents=True)
    rows = [{"case": c, "provider": p, "pass": s, "ms": v, "bytes": 4_000_000_000,
             "status": "ok", "group": "main"} for (c, p, s), v in ms.items()]
    rows.append({"case": "len_256", "provider": "blockattn", "pass": "fwd", "ms": 9.0,
                 "bytes": 1, "status": "ok", "group": "sweep_len"})  # not a main shape
    meta = {"gpu": "NVIDIA H200", "gpu_kind": kind, "git": {"commit": "abc1234"}}
    (d / "bench.json").write_text(json.dumps({"meta": meta, "ceiling": {"tbps": tbps},
                                              "measurements": rows, "errors": errors or []}))
    return d


def _medians(*dirs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_medians.py"),
                           *map(str, dirs)], capture_output=True, text=True)


def test_bench_medians_known_answers(tmp_path: Path) -> None:
    plain, rot = ("P_D128", "blockattn", "bwd"), ("P_D128", "blockattn_rotary", "bwd")
    runs = [_bench(tmp_path / str(i), {plain: p, rot: r}, tbps=t)
            for i, (p, r, t) in enumerate([(2.0, 3.0, 4.0), (1.0, 3.3, 3.0), (4.0, 2.9, 5.0)])]
    out = _medians(*runs)
    assert out.returncode == 0, out.stderr
    # medians 2.0 and 3.0 ms; 4e9 B / 2 ms = 2 TB/s against the median ceiling 4 TB/s: 50 %
    assert "| P_D128 | blockattn | bwd | 2.000 / 1.000 / 4.000 | 2.000 | 50.0 |" in out.stdout
    rot_row = "| P_D128 | blockattn_rotary | bwd | 3.000 / 3.300 / 2.900 | 3.000 | 33.3 |"
    assert rot_row in out.stdout
    assert "P_D128 1.50x" in out.stdout and "len_256" not in out.stdout


def test_bench_medians_refuses_what_it_cannot_take_a_median_of(tmp_path: Path) -> None:
    key = ("P_D64", "blockattn", "fwd")
    a = _bench(tmp_path / "a", {key: 1.0})
    assert "missing" in _medians(a, tmp_path / "none").stderr
    other = _bench(tmp_path / "b", {key: 1.0}, kind="nvidia-h100-80gb-hbm3")
    assert "different GPU kinds" in _medians(a, other).stderr
    failed = _bench(tmp_path / "c", {key: 1.0}, errors=[{"trace": "x"}])
    assert "with errors" in _medians(a, failed).stderr
    partial = _bench(tmp_path / "d", {("P_D64", "fa2", "fwd"): 2.0})
    out = _medians(a, partial)
    assert out.returncode == 1 and "measured in 1 of 2 runs" in out.stderr
    assert _medians(a).returncode == 2  # one run is no median


def test_sass_lines_counts_a_cpu_build() -> None:
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sass_lines.py"),
                          "bwd-bf16-d64-off-gluon", "--top", "3"],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    head, *_ = out.stdout.splitlines()
    total = int(head.split("B, ")[1].split(" instructions")[0])
    assert total > 1000 and "spills 0/0 B" in head
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("| ") and ".py:" in ln]
    assert len(rows) == 3 and all(int(r.split("|")[1]) > 0 for r in rows)
    bad = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sass_lines.py"), "nope-*"],
                         capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "no variant matches" in bad.stderr
    many = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sass_lines.py"),
                           "bwd-*-gluon"], capture_output=True, text=True, cwd=REPO)
    assert many.returncode == 2 and "not 1" in many.stderr
