"""`blockattn report DIR`: results.jsonl (complete or partial) + report.json meta -> report.html,
report.md and plots. The run's summary.md and the gate's gate.md are left as they are."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HELP = (
    "render a run or gate directory to report.html + report.md with plots (partial runs ok; "
    "summary.md / gate.md are not touched)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", type=Path, help="run or gate report directory (holds results.jsonl)")
    p.add_argument("--out", type=Path, help="output directory (default: DIR)")


def is_partial(d: Path) -> bool:
    """A run writes report.json when it finishes; a gate always writes gate.md (and may not
    write report.json): a directory with neither is a run still going, or one that died."""
    return not (d / "report.json").exists() and not (d / "gate.md").exists()


def load_report_json(d: Path) -> dict[str, Any] | None:
    """report.json's payload, or None where it is absent or unreadable (said on stderr)."""
    p = d / "report.json"
    if not p.exists():
        return None
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        print(f"note: {p} unreadable ({exc}); rendering without its provenance", file=sys.stderr)
        return None
    return data if isinstance(data, dict) else None


def main(args: argparse.Namespace) -> int:
    from blockattn.report.html import read_gate_md, render
    from blockattn.run import session
    from blockattn.run.results import RESULTS, load_records

    session.check_not_in_use(args.dir, "report")
    report = load_report_json(args.dir)
    torn: list[int] = []
    if (args.dir / RESULTS).exists() or report is None or not isinstance(report.get("cases"), list):
        records = load_records(args.dir, torn)  # FileNotFoundError -> exit 2
    else:  # a report.json without results.jsonl (copied out of CI): its cases are the records
        records = report["cases"]
    if torn:  # a killed run leaves at most one torn line per kill; say so, do not hide it
        print(
            f"note: skipped {len(torn)} torn line(s) of {args.dir}/results.jsonl "
            f"(line {', '.join(map(str, torn[:10]))}): cases cut off by a killed run",
            file=sys.stderr,
        )
    incomplete = session.completeness(args.dir, records, torn)
    for line in incomplete:  # rendered all the same (partial runs ok), but never silently
        print(f"note: incomplete run: {line}", file=sys.stderr)
    partial = is_partial(args.dir) or bool(incomplete)
    meta = report.get("meta") if report and isinstance(report.get("meta"), dict) else None
    checks = (
        report.get("selfcheck") if report and isinstance(report.get("selfcheck"), list) else None
    )
    files = render(
        records,
        args.out or args.dir,
        partial=partial,
        meta=meta,
        selfcheck=checks,
        gate=read_gate_md(args.dir / "gate.md"),
        contract=(report.get("contract")
                  if report and isinstance(report.get("contract"), list) else None),
        incomplete=incomplete,
    )
    planned = session.planned_of(args.dir)
    print(f"{len(records)} cases{' (partial)' if partial else ''}"
          + (f" of {len(planned)} planned" if planned is not None else ""))  # fmt: skip
    for k, p in files.items():
        print(f"  {k}: {p}")
    return 0
