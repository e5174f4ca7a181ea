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
import torch

from blockattn.bench.case import draw_lengths_fill
from blockattn.bench.report import CSV_COLUMNS, compare_runs, derive, merge_runs
from blockattn.bench.runner import PASSES, BenchConfig, plan

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("bench")
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "blockattn", "bench", "--smoke", "--out", str(out)),
            *("--gpu-kind", "cpu-smoke-test"),
        ],
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
    rm = data["read_mostly_ceiling"]  # measured in the same run (issue 44 item 3)
    assert rm["tbps"] > 0 and (rm["reads"], rm["writes"]) == (3, 1)
    assert "torch.addcmul" in rm["method"]
    assert {"ok", "passes_above_read_mostly"} <= set(data["ceiling_checks"])
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
    assert "### Targets" in stdout and tail[-1].startswith("| P_smoke_fill | 0.3 fill ")


def test_conventions_and_gpu_kind_recorded(smoke: tuple[Path, str]) -> None:
    out, stdout = smoke
    data = json.loads((out / "bench.json").read_text())
    assert data["meta"]["gpu_kind"] == "cpu-smoke-test"
    assert data["ceiling"]["gpu_kind"] == "cpu-smoke-test"
    ms = data["measurements"]
    assert all(r["gpu_kind"] == "cpu-smoke-test" for r in ms)
    assert all(r["sparsity_convention"] in ("empty", "fill") for r in ms + data["cases"])
    conv = {r["case"]: r["sparsity_convention"] for r in ms}
    assert conv["P_smoke"] == "empty" and conv["P_smoke_fill"] == "fill"
    by = {(r["case"], r["provider"], r["pass"]): r for r in ms}
    for prov in ("blockattn", "blockattn_rotary"):
        assert by[("P_smoke_fill", prov, "fwd")]["status"] == "ok"
    # Same seed, same number, other convention: a different length draw.
    assert by[("P_smoke_fill", "blockattn", "fwd")]["T"] != by[("P_smoke", "blockattn", "fwd")]["T"]
    assert "| P_smoke_fill | 0.3 fill (fill " in stdout and "| P_smoke | 0.3 empty (fill " in stdout


def test_projection_entries(smoke: tuple[Path, str]) -> None:
    out, stdout = smoke
    data = json.loads((out / "bench.json").read_text())
    by = {(r["case"], r["provider"], r["pass"]): r for r in data["measurements"]}
    for prov in ("projection_packed", "projection_unfused"):
        for pas in ("bwd", "fwdbwd"):
            r = by[("proj_P_smoke", prov, pas)]
            assert r["status"] == "ok" and r["check"] == "pass" and r["ms"] > 0, r
    (chk,) = [c for c in data["checks"] if c["case"] == "proj_P_smoke"]
    assert chk["check"] == "pass" and chk["check_kind"].startswith("bitwise")
    assert chk["provider"].startswith("blockattn")  # a failed check fails the command
    assert "### Projection + fused rotary: packed vs unfused gradient" in stdout


def test_plan_respects_quick_and_providers() -> None:
    full = plan(BenchConfig())
    quick = plan(BenchConfig(quick=True))
    assert [s.name for s in full[:2]] == ["P_D128", "P_D64"]
    assert (full[0].B, full[0].max_len, full[0].sparsity, full[0].H) == (1152, 4096, 0.7, 4)
    assert len(quick) < len(full)
    only = plan(BenchConfig(providers=("fa2",), extras=False))
    # --providers does not filter the projection entries (they are not providers).
    assert all(s.providers == ("fa2",) for s in only if s.group != "projection")
    assert [s.name for s in only if s.group == "projection"] == ["proj_P_D128", "proj_P_D64"]
    assert not any(s.group == "projection" for s in plan(BenchConfig(projection=False)))
    some = plan(BenchConfig(cases=("P_D128", "proj_P_D64"), sweeps=False, extras=False))
    assert [(s.name, s.group) for s in some] == [("P_D128", "main"), ("proj_P_D64", "projection")]
    with pytest.raises(ValueError, match=r"--cases: unknown \['P_D96'\]"):
        plan(BenchConfig(cases=("P_D128", "P_D96")))


def test_plan_runs_shape_p_under_both_conventions() -> None:
    main = [s for s in plan(BenchConfig()) if s.group == "main"]
    by = {(s.D, s.sparsity_convention): s for s in main}
    assert set(by) == {(128, "empty"), (64, "empty"), (128, "fill"), (64, "fill")}
    for s in main:
        assert (s.B, s.max_len, s.sparsity, s.H) == (1152, 4096, 0.7, 4)
    assert by[(128, "fill")].providers == by[(128, "empty")].providers


def test_fill_convention_matches_tritonbench_formula() -> None:
    """tritonbench blocked_attention: s >= 0.5 -> uniform ints in [int((2s-1) L), L)."""
    g = torch.Generator().manual_seed(0)
    L = 4096
    lens = draw_lengths_fill(100_000, L, 0.7, g)
    assert int(lens.min()) >= int(0.4 * L) - 1 and int(lens.max()) <= L - 1
    assert int(lens.min()) <= int(0.4 * L) + 2 and int(lens.max()) >= L - 3  # the whole range
    low = int((2 * 0.7 - 1) * L)
    assert float(lens.double().mean()) == pytest.approx((low + L - 1) / 2, rel=2e-3)
    small = draw_lengths_fill(100_000, L, 0.2, g)  # s < 0.5: [0, int(2 s L))
    assert int(small.min()) == 0 and int(small.max()) == int(0.4 * L) - 1
    assert float(small.double().mean()) == pytest.approx(0.2 * L, rel=5e-3)
    assert torch.equal(draw_lengths_fill(3, L, 1.0, g), torch.full((3,), L))
    assert torch.equal(draw_lengths_fill(3, L, 0.0, g), torch.zeros(3, dtype=torch.int64))
    # Ours reads the same 0.7 as the EMPTY fraction: mean (1 - 0.7) L, a 2.33x smaller T.
    from blockattn.cases.generate import draw_lengths

    ours = draw_lengths(100_000, L, 0.7, g)
    assert float(ours.double().mean()) == pytest.approx(0.3 * L, rel=5e-3)


def _row(kind: str, provider: str = "blockattn", ms: float = 2.0) -> dict:
    return {
        "case": "P",
        "provider": provider,
        "pass": "fwd",
        "status": "ok",
        "ms": ms,
        "bytes": 10**9,
        "rotary": False,
        "gpu_kind": kind,
    }


def test_ratios_refuse_mixed_gpu_kinds() -> None:
    ok = derive([_row("nvidia-h100-x1"), _row("nvidia-h100-x1", "fa2", 4.0)], None)
    assert ok[0]["speedup_vs_fa2"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match=r"'nvidia-h200' vs 'nvidia-h100-x1'"):
        derive([_row("nvidia-h100-x1"), _row("nvidia-h200", "fa2", 4.0)], None)
    ceiling = {"tbps": 3.0, "gpu_kind": "nvidia-h200"}
    with pytest.raises(ValueError, match="'nvidia-h200' vs 'nvidia-h100-x1'"):
        derive([_row("nvidia-h100-x1")], ceiling)

    def run(kind: str, ms: float) -> dict:
        return {"meta": {"gpu": "x", "gpu_kind": kind}, "measurements": [_row(kind, ms=ms)]}

    (cmp,) = compare_runs(run("nvidia-h200", 2.0), run("nvidia-h200", 3.0))
    assert cmp["ratio"] == pytest.approx(1.5)
    assert len(merge_runs([run("nvidia-h200", 2.0), run("nvidia-h200", 3.0)])["measurements"]) == 2
    with pytest.raises(ValueError, match="'nvidia-h100-x1' vs 'nvidia-h200'"):
        compare_runs(run("nvidia-h100-x1", 2.0), run("nvidia-h200", 3.0))
    with pytest.raises(ValueError, match="'nvidia-h200' vs 'nvidia-h100-x1'"):
        merge_runs([run("nvidia-h200", 2.0), run("nvidia-h100-x1", 3.0)])
    # A bench.json from before --gpu-kind: its kind is a slug of meta.gpu, still compared.
    old = {"meta": {"gpu": "NVIDIA H200"}, "measurements": [_row("nvidia-h200")]}
    assert compare_runs(old, run("nvidia-h200", 3.0))[0]["ratio"] == pytest.approx(1.5)
    with pytest.raises(ValueError, match="'nvidia-h200' vs 'nvidia-h100-x1'"):
        compare_runs(old, run("nvidia-h100-x1", 3.0))


def _fwdbwd_row(peak_extra_bytes: int) -> dict:
    T, H, D, n_blocks, B = 100_000, 4, 128, 1_700, 64
    outputs = 4 * T * H * D * 2
    return {
        "case": "P",
        "provider": "blockattn",
        "pass": "fwdbwd",
        "status": "ok",
        "ms": 1.0,
        "T": T,
        "H": H,
        "D": D,
        "dtype": "bfloat16",
        "n_blocks": n_blocks,
        "B": B,
        "peak_mem_mb": (outputs + peak_extra_bytes) / 2**20,
    }


def test_peak_memory_target_catches_a_saved_logsumexp() -> None:
    from blockattn.bench.report import _peak_beyond_outputs, _targets

    row = _fwdbwd_row(200 * 1024)  # tile table and its temporaries: ~0.2 MiB
    extra, allowed = _peak_beyond_outputs(row)
    assert extra == pytest.approx(200 / 1024) and extra <= allowed
    assert any("peak memory" in t and t.endswith("| yes |") for t in _targets([row], "P"))
    lse = 4 * row["T"] * row["H"]  # an fp32 logsumexp kept for the backward
    extra, allowed = _peak_beyond_outputs(_fwdbwd_row(200 * 1024 + lse))
    assert extra > allowed
    assert any(
        "peak memory" in t and t.endswith("| NO |")
        for t in _targets([_fwdbwd_row(200 * 1024 + lse)], "P")
    )
    assert _peak_beyond_outputs(None) == (None, None)


def test_bench_entries_are_the_providers_own_timings() -> None:
    # One provider concept: every bench entry is a `Timing` a suite provider declares; the bench
    # defines none of its own (the names are the bench's row names since the first H200 run).
    from blockattn import providers
    from blockattn.bench.entries import builtin_entries, entries

    owned = {t.name: p.name for p in providers.all_providers().values()
             for t in providers.timings_of(p)}  # fmt: skip
    assert set(entries()) == set(owned)
    assert set(builtin_entries()) == {
        "blockattn", "blockattn_rotary", "fa2", "fa2_rotary_eager", "fa2_rotary_compiled",
        "sdpa_cudnn", "flex", "eager", "fa4",
        "blockattn_fast", "blockattn_rotary_fast", "blockattn_rotary_fast_tbl16",  # fast mode
    }  # fmt: skip
    assert {owned[n] for n in ("fa2_rotary_eager", "fa2_rotary_compiled")} == {"fa2"}
    for name, t in builtin_entries().items():
        assert t.rotary == ("rotary" in name), name
