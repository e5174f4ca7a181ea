"""report.json: a run's or gate's meta, status counts, the tensor table and every case record,
written atomically (a reader never sees half a report)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blockattn.report.summarize import status_counts, tensor_table


def write_report_json(
    out: Path,
    records: list[dict[str, Any]],
    meta: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> Path:
    payload = {
        "meta": meta,
        "status_counts": status_counts(records),
        "table": tensor_table(records),
        **(extra or {}),
        "cases": records,
    }
    p = out / "report.json"
    tmp = p.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1, allow_nan=False, default=_json_default))
    tmp.replace(p)  # atomic: a reader never sees half a report
    return p


def _json_default(x: Any) -> Any:
    if isinstance(x, float):
        return None
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
