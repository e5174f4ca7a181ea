"""`bench --provider mypkg.attn:fn` (issue 43, item 5): the user's kernel is in the summary
table and in a PNG of every provider, the report goes beside the others (reports/bench-*), and
blockattn's GPU targets read "n/a on cpu" on a CPU (never NO)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from blockattn.bench.report import plot, summary_markdown
from blockattn.commands import bench as bench_cmd


def _data(gpu: str = "cpu", interpret: str = "1") -> dict:
    rng = np.random.default_rng(7)
    rows = []
    for prov in ("blockattn", "fa2", "mine"):
        for pas in ("fwd", "bwd", "fwdbwd"):
            rows.append({"case": "P_smoke", "group": "main", "provider": prov, "pass": pas,
                         "status": "ok", "check": "pass", "ms": float(rng.uniform(50, 500)),
                         "pct_ceiling": float(rng.uniform(0, 1)), "speedup_vs_fa2": None,
                         "bytes": 1e6, "sparsity": 0.3, "sparsity_convention": "empty",
                         "fill": 0.9, "gpu_kind": gpu})  # fmt: skip
    for L in (32, 64):
        for pas in ("fwd", "bwd", "fwdbwd"):
            rows.append({"case": f"len_{L}", "group": "sweep_len", "provider": "blockattn",
                         "pass": pas, "status": "ok", "check": "pass", "max_len": L,
                         "ms": float(rng.uniform(5, 50)), "pct_ceiling": 0.5,
                         "sparsity": 0.0, "gpu_kind": gpu})  # fmt: skip
    return {
        "meta": {"gpu": gpu, "gpu_kind": gpu, "torch": "x", "triton": "y",
                 "git": {"commit": "abcdef0123", "dirty": False}, "flash": {},
                 "triton_interpret": interpret, "config": {"outside": ["mine"]}},
        "ceiling": {"tbps": 0.01, "bytes_moved": 2e9, "ms": 10.0},
        "measurements": rows, "checks": [], "status": "done", "elapsed_s": 1.0, "skipped": [],
    }  # fmt: skip


def test_summary_has_the_users_kernel_and_no_NO_on_cpu() -> None:
    md = summary_markdown(_data())
    ours = md.split("### Summary: your kernel(s)")[1].split("###")[0]
    assert "| P_smoke |" in ours and "| mine |" in ours and ours.count("| mine |") == 3
    targets = md.split("### Targets")[1]
    assert "n/a on cpu" in targets and "| NO |" not in targets


def test_gpu_targets_still_judged_on_a_gpu() -> None:
    md = summary_markdown(_data(gpu="NVIDIA H100", interpret="0"))
    assert "n/a on cpu" not in md.split("### Targets")[1]


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="no matplotlib")
def test_a_png_shows_every_provider_at_the_main_shapes(tmp_path: Path, monkeypatch) -> None:
    import matplotlib.axes

    labels: list[str] = []
    orig = matplotlib.axes.Axes.bar

    def bar(self, *a, **k):
        labels.append(k.get("label"))
        return orig(self, *a, **k)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", bar)
    written = plot(_data(), tmp_path)
    assert "main_shapes.png" in written
    assert (tmp_path / "main_shapes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {"blockattn", "fa2", "mine"} <= set(labels)


def test_bench_writes_beside_the_other_reports(monkeypatch) -> None:
    from blockattn import cli

    args = cli.build_parser().parse_args(["bench", "--smoke"])
    assert args.out is None
    seen = {}

    def stop(a):  # the directory is decided before anything runs (and before a re-exec)
        seen["out"] = a.out
        raise SystemExit(0)

    monkeypatch.setattr(bench_cmd, "_needs_interpreter", lambda: True)
    monkeypatch.setattr(bench_cmd, "_reexec", stop)
    with pytest.raises(SystemExit):
        bench_cmd.main(args)
    assert Path(seen["out"]).parent == Path("reports")
    assert Path(seen["out"]).name.startswith("bench-")
