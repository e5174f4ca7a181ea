"""`blockattn bench --smoke`: the CPU path (Triton interpreter, wall-clock timer) end to end.

Runs in a subprocess: TRITON_INTERPRET must be set before blockattn's kernels are defined, and
this test process may already have imported them without it.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from blockattn.bench.report import CSV_COLUMNS
from blockattn.bench.runner import PASSES, BenchConfig, plan

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("bench")
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "blockattn", "bench", "--smoke", "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout


def test_json_structure(smoke: tuple[Path, str]) -> None:
    out, _ = smoke
    data = json.loads((out / "bench.json").read_text())
    for key in ("meta", "ceiling", "cases", "checks", "measurements", "status", "plots"):
        assert key in data
    for key in ("gpu", "torch", "triton", "git", "date", "flash"):
        assert key in data["meta"]
    assert data["status"] == "complete"
    assert data["ceiling"]["tbps"] > 0 and data["ceiling"]["bytes_moved"] > 0
    ms = data["measurements"]
    by = {(r["case"], r["provider"], r["pass"]): r for r in ms}
    for pas in PASSES:
        for prov in ("blockattn", "blockattn_rotary"):
            r = by[("P_smoke", prov, pas)]
            assert r["status"] == "ok", r
            assert r["ms"] > 0 and r["bytes"] > 0 and r["tbps"] > 0 and r["pct_ceiling"] > 0
        # Baselines without a CPU path are reported as unsupported, with the reason.
        for prov in ("fa2", "fa2_rotary_eager", "flex", "sdpa_cudnn"):
            r = by[("P_smoke", prov, pas)]
            assert r["status"] == "unsupported" and r["note"], r
    # The FP64 sample check ran for the kernels and passed within the stated bound.
    checks = {(c["case"], c["provider"]): c for c in data["checks"]}
    c = checks[("P_smoke", "blockattn_rotary")]
    assert c["check"] == "pass" and 0 <= c["relerr_O"] <= c["bound_O"]
    assert 0 <= c["relerr_dQ"] <= c["bound_dQ"]
    # Bytes: fwd = 4 tensor passes (+ sinu_pos with rotary), bwd = 7.
    plain = by[("P_smoke", "blockattn", "fwd")]
    tb = plain["T"] * plain["H"] * plain["D"] * 2
    assert plain["bytes"] == 4 * tb
    assert by[("P_smoke", "blockattn", "bwd")]["bytes"] == 7 * tb
    assert (
        by[("P_smoke", "blockattn_rotary", "bwd")]["bytes"] == 7 * tb + plain["T"] * plain["D"] * 4
    )


def test_csv_and_plots(smoke: tuple[Path, str]) -> None:
    out, stdout = smoke
    with (out / "bench.csv").open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == CSV_COLUMNS
        rows = list(reader)
    assert rows and {r["group"] for r in rows} >= {"main", "sweep_len", "sweep_sparsity", "extra"}
    for name in ("time_vs_max_len.png", "time_vs_sparsity.png", "pct_ceiling.png"):
        assert (out / name).stat().st_size > 0
    # The Markdown summary with the targets table is the last thing printed.
    tail = stdout.strip().splitlines()
    assert "### Targets" in stdout and tail[-1].startswith("| P_smoke |")


def test_plan_respects_quick_and_providers() -> None:
    full = plan(BenchConfig())
    quick = plan(BenchConfig(quick=True))
    assert [s.name for s in full[:2]] == ["P_D128", "P_D64"]
    assert (full[0].B, full[0].max_len, full[0].sparsity, full[0].H) == (1152, 4096, 0.7, 4)
    assert len(quick) < len(full)
    only = plan(BenchConfig(providers=("fa2",), extras=False))
    assert all(s.providers == ("fa2",) for s in only)


def _fwdbwd_row(peak_extra_bytes: int) -> dict:
    T, H, D, n_blocks, B = 100_000, 4, 128, 1_700, 64
    outputs = 4 * T * H * D * 2
    return {"case": "P", "provider": "blockattn", "pass": "fwdbwd", "status": "ok", "ms": 1.0,
            "T": T, "H": H, "D": D, "dtype": "bfloat16", "n_blocks": n_blocks, "B": B,
            "peak_mem_mb": (outputs + peak_extra_bytes) / 2**20}


def test_peak_memory_target_catches_a_saved_logsumexp() -> None:
    from blockattn.bench.report import _peak_beyond_outputs, _targets

    row = _fwdbwd_row(200 * 1024)  # tile table and its temporaries: ~0.2 MiB
    extra, allowed = _peak_beyond_outputs(row)
    assert extra == pytest.approx(200 / 1024) and extra <= allowed
    assert any("peak memory" in t and t.endswith("| yes |") for t in _targets([row], "P"))
    lse = 4 * row["T"] * row["H"]  # an fp32 logsumexp kept for the backward
    extra, allowed = _peak_beyond_outputs(_fwdbwd_row(200 * 1024 + lse))
    assert extra > allowed
    assert any("peak memory" in t and t.endswith("| NO |") for t in
               _targets([_fwdbwd_row(200 * 1024 + lse)], "P"))
    assert _peak_beyond_outputs(None) == (None, None)
