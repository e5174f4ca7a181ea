"""What the same-run timing scripts under benchmarks/ share: the elementwise comparison of a
variant's output with the reference's, and the JSON they write (device, commit, copy ceiling,
command, rows). Imported as a sibling module (`python benchmarks/<script>.py` puts this folder
first on sys.path)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch


def elements_apart(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements of a beyond 1 ulp (of a's dtype) + 2^-16 of b's largest magnitude from b, or
    non-finite: two kernels forming the same products with fp32 sums in another order stay
    within it (see tests/kernels/test_attention.py::test_rotary_chunks_match_whole_tile)."""
    fa, fb = a.double(), b.double()
    tol = torch.finfo(a.dtype).eps * torch.maximum(fa.abs(), fb.abs()) + 2.0**-16 * float(
        fb.abs().max())
    return int((~((fa - fb).abs() <= tol)).sum())


def write_rows(out: Path, script: str, ceiling: dict[str, Any], rows: list[dict]) -> Path:
    """out/<script>.json: {"meta": device, commit, ceiling, command; "rows": rows}."""
    from blockattn.run.execute import device_info, git_commit

    out.mkdir(parents=True, exist_ok=True)
    meta = {**device_info(), "commit": git_commit(), "ceiling": ceiling,
            "command": f"python benchmarks/{script}.py " + " ".join(sys.argv[1:])}
    path = out / f"{script}.json"
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return path
