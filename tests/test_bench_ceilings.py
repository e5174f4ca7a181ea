"""The read-mostly ceiling beside the copy ceiling (issue 44 item 3): the arithmetic of
`pct_read_mostly`, the check that it bounds the copy ceiling and every pass, and the report
lines, on hand-made rows (no timing)."""

from __future__ import annotations

import pytest

from blockattn.bench.measure import cuda, read_mostly_ceiling
from blockattn.bench.report import ceiling_checks, derive, summary_markdown

KIND = "nvidia-h200"
COPY = {"tbps": 4.0, "bytes_moved": 4 << 30, "ms": 1.0, "gpu_kind": KIND}
RM = {"tbps": 5.0, "reads": 3, "writes": 1, "bytes_moved": 4 << 30, "ms": 0.8,
      "method": "triton stream BLOCK=4096 warps=8 (fastest of 4), bf16, median do_bench",
      "gpu_kind": KIND}  # fmt: skip


def _row(provider: str, pas: str, ms: float, nbytes: int = 4 * 10**9) -> dict:
    return {"case": "P_D128", "group": "main", "provider": provider, "pass": pas, "status": "ok",
            "check": "pass", "ms": ms, "bytes": nbytes, "rotary": False, "gpu_kind": KIND,
            "sparsity": 0.7, "sparsity_convention": "empty"}  # fmt: skip


def test_pct_read_mostly_is_bandwidth_over_the_read_mostly_ceiling() -> None:
    fwd, bwd = derive([_row("blockattn", "fwd", 0.97), _row("blockattn", "bwd", 2.0, 7 * 10**9)],
                      COPY, RM)  # fmt: skip
    assert fwd["tbps"] == pytest.approx(4 / 0.97)
    assert fwd["pct_ceiling"] == pytest.approx(100 * (4 / 0.97) / 4.0)  # 103 % of the copy
    assert fwd["pct_read_mostly"] == pytest.approx(100 * (4 / 0.97) / 5.0)
    assert bwd["pct_read_mostly"] == pytest.approx(100 * 3.5 / 5.0)
    # Without a read-mostly ceiling (bench.json from before it), the column is empty.
    (old,) = derive([_row("blockattn", "fwd", 1.0)], COPY)
    assert old["pct_read_mostly"] is None and old["pct_ceiling"] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="read-mostly"):
        derive([_row("blockattn", "fwd", 1.0)], COPY, {**RM, "gpu_kind": "nvidia-h100-x1"})


def test_the_ceiling_must_bound_the_copy_and_every_pass() -> None:
    ms = derive([_row("blockattn", "fwd", 0.97), _row("fa2", "fwd", 2.0)], COPY, RM)
    chk = ceiling_checks(COPY, RM, ms)
    assert chk["ok"] and chk["read_mostly_ge_copy"]
    assert chk["read_mostly_over_copy"] == pytest.approx(1.25)
    assert chk["max_pass"] == "P_D128/blockattn/fwd"
    assert chk["max_pass_tbps"] == pytest.approx(4 / 0.97)
    # A pass faster than the ceiling: the ceiling is not the limit it claims to be.
    fast = derive([_row("blockattn", "fwd", 0.7)], COPY, RM)
    bad = ceiling_checks(COPY, RM, fast)
    assert not bad["ok"]
    assert [r["provider"] for r in bad["passes_above_read_mostly"]] == ["blockattn"]
    # Below the copy ceiling: not a read-mostly ceiling either.
    low = {**RM, "tbps": 3.9}
    assert not ceiling_checks(COPY, low, derive([_row("fa2", "fwd", 2.0)], COPY, low))["ok"]
    assert ceiling_checks(COPY, None, ms) is None and ceiling_checks(None, RM, ms) is None


def _data(rm: dict, fwd_ms: float) -> dict:
    ms = derive([_row("blockattn", "fwd", fwd_ms), _row("blockattn", "bwd", 2.0, 7 * 10**9)],
                COPY, rm)  # fmt: skip
    meta = {"gpu": "NVIDIA H200", "gpu_kind": KIND, "torch": "2.11", "triton": "3.6",
            "git": {"commit": "0123456789ab", "dirty": False}, "flash": {}}  # fmt: skip
    return {"meta": meta, "status": "complete", "elapsed_s": 1.0, "ceiling": COPY,
            "read_mostly_ceiling": rm, "ceiling_checks": ceiling_checks(COPY, rm, ms),
            "checks": [], "skipped": [], "measurements": ms}  # fmt: skip


def test_summary_reports_both_ceilings_and_keeps_targets_on_the_copy() -> None:
    text = summary_markdown(_data(RM, 0.97))
    assert "Copy ceiling: 4.000 TB/s" in text
    assert "Read-mostly ceiling (3 read : 1 written" in text and "5.000 TB/s" in text
    assert "1.250x the copy ceiling" in text and ">= every pass: yes" in text
    row = next(x for x in text.splitlines() if x.startswith("| P_D128 | 0.7 empty | fwd | 4.00"))
    cells = [c.strip() for c in row.split("|")]
    assert cells[7:9] == ["103.1", "82.5"]  # % of the copy ceiling, % of the read-mostly one
    # The targets are still read against the copy ceiling.
    target = next(x for x in text.splitlines() if "fwd % of copy ceiling" in x)
    assert "| 103.093 | >= 95 % | yes |" in target
    bad = summary_markdown(_data({**RM, "tbps": 4.1}, 0.97))
    assert ">= every pass: **NO**" in bad
    assert "above the read-mostly ceiling: P_D128/blockattn/fwd" in bad


def test_read_mostly_measurement_runs() -> None:
    """torch.addcmul alone on a CPU; on a GPU the Triton streams beside it."""
    rm = read_mostly_ceiling(1 << 16, 1.0, 1.0, smoke=True)
    assert (rm["reads"], rm["writes"]) == (3, 1)
    assert rm["bytes_moved"] == 4 * rm["buffer_bytes"] == 4 * (1 << 15)
    methods = list(rm["methods_tbps"])
    assert methods[0] == "torch.addcmul" and rm["tbps"] > 0, methods
    assert (len(methods) > 1) == cuda(), methods
