"""`blockattn report DIR`: results.jsonl (complete or partial) -> summary.md, report.html, plots."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "render a run directory's results.jsonl to Markdown + HTML with plots (partial runs ok)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", type=Path, help="run report directory (holds results.jsonl)")
    p.add_argument("--out", type=Path, help="output directory (default: DIR)")


def main(args: argparse.Namespace) -> int:
    from blockattn.harness.report import render
    from blockattn.harness.results import load_records

    torn: list[int] = []
    records = load_records(args.dir, torn)  # FileNotFoundError -> exit 2
    if torn:  # a killed run leaves at most one torn line per kill; say so, do not hide it
        print(
            f"note: skipped {len(torn)} torn line(s) of {args.dir}/results.jsonl "
            f"(line {', '.join(map(str, torn[:10]))}): cases cut off by a killed run",
            file=sys.stderr,
        )
    partial = not (args.dir / "report.json").exists()
    files = render(records, args.out or args.dir, partial=partial)
    print(f"{len(records)} cases{' (partial)' if partial else ''}")
    for k, p in files.items():
        print(f"  {k}: {p}")
    return 0
