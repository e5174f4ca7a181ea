"""Append-only results.jsonl: one JSON record per finished case, flushed as it finishes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RESULTS = "results.jsonl"


def iter_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Records of a results.jsonl (or a directory holding one). A torn last line (the run was
    killed mid-write) is skipped, so partial runs stay readable."""
    p = Path(path)
    if p.is_dir():
        p = p / RESULTS
    if not p.exists():
        raise FileNotFoundError(f"no results file at {p}")
    with open(p) as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """Last record per case id wins (a resumed run may re-run a case)."""
    by_id: dict[str, dict[str, Any]] = {}
    for rec in iter_records(path):
        by_id[rec["case_id"]] = rec
    return list(by_id.values())


class ResultsWriter:
    def __init__(self, out_dir: str | Path) -> None:
        self.path = Path(out_dir) / RESULTS
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # If a previous run died mid-line, terminate that line so our first record starts clean.
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                torn = fh.read(1) != b"\n"
            if torn:
                with open(self.path, "a") as fh:
                    fh.write("\n")
        self._fh = open(self.path, "a")  # noqa: SIM115 - lives as long as the writer

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, allow_nan=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
