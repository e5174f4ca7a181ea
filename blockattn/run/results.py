"""Append-only results.jsonl: one JSON record per finished case, flushed as it finishes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RESULTS = "results.jsonl"


def iter_records(path: str | Path, skipped: list[int] | None = None) -> Iterator[dict[str, Any]]:
    """Records of a results.jsonl (or a directory holding one).

    A line that is not valid JSON is a torn write (the run was killed mid-line; a resumed run
    then appends after it) and is skipped; its 1-based line number goes to `skipped` so callers
    can report it. Valid JSON that is not a record (no string case_id, no spec/providers objects)
    means the file was tampered with: ValueError naming the file and line.
    """
    p = Path(path)
    if p.is_dir():
        p = p / RESULTS
    if not p.exists():
        raise FileNotFoundError(f"no results file at {p}")
    # errors="replace": binary garbage becomes an undecodable line (skipped), not a crash.
    with open(p, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                if skipped is not None:
                    skipped.append(lineno)
                continue
            if not (
                isinstance(rec, dict)
                and isinstance(rec.get("case_id"), str)
                and isinstance(rec.get("spec"), dict)
                and isinstance(rec.get("providers"), dict)
            ):
                raise ValueError(
                    f"{p}:{lineno}: not a blockattn result record (needs a string case_id and "
                    "spec/providers objects)"
                )
            yield rec


def load_records(path: str | Path, skipped: list[int] | None = None) -> list[dict[str, Any]]:
    """Last record per case id wins (a resumed run may re-run a case). See iter_records for
    `skipped` (line numbers of torn lines)."""
    by_id: dict[str, dict[str, Any]] = {}
    for rec in iter_records(path, skipped):
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


def load_report_cases(path: str | Path) -> list[dict[str, Any]]:
    """Cases of a report.json, or of a report directory (report.json or results.jsonl)."""
    p = Path(path)
    if p.is_dir():
        if (p / "report.json").exists():
            p = p / "report.json"
        else:
            return load_records(p)
    if not p.exists():
        raise FileNotFoundError(f"no report at {p}")
    if p.suffix == ".jsonl":
        return load_records(p)
    try:
        cases = json.loads(p.read_text())["cases"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{p}: not a blockattn report.json ({exc!r})") from exc
    for i, c in enumerate(cases if isinstance(cases, list) else [None]):
        if not (
            isinstance(c, dict)
            and isinstance(c.get("case_id"), str)
            and isinstance(c.get("spec"), dict)
            and isinstance(c.get("providers"), dict)
        ):
            raise ValueError(f"{p}: cases[{i}] is not a blockattn result record")
    return cases


# ---------------------------------------------------------------- tampering (isolation)


def file_bytes(path: Path) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def check_results_file(out: Path, before: bytes, written: list[str]) -> list[str]:
    """Lines naming how results.jsonl differs from what the judge wrote to it during the run
    (the bytes it held before, then exactly the records `written`, by case id, in order)."""
    path = Path(out) / RESULTS
    try:
        data = path.read_bytes()
    except OSError as exc:
        return [f"results.jsonl unreadable after the run: {exc}"]
    if not data.startswith(before):
        return ["results.jsonl: lines written before this run were changed during it"]
    ids = []
    for line in data[len(before):].decode("utf-8", "replace").splitlines():
        if line.strip():
            try:
                ids.append(json.loads(line).get("case_id"))
            except (json.JSONDecodeError, AttributeError):
                ids.append(None)
    if ids != written:
        return [f"results.jsonl holds {len(ids)} line(s) from this run where the judge wrote "
                f"{len(written)}: something else wrote to it during the run"]  # fmt: skip
    return []
