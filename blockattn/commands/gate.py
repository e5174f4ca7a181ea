"""`blockattn gate`: CI decision - corpus results vs a tolerance file (and an earlier report)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from blockattn.harness.tolerances import resolve_path as _tol_path

HELP = (
    "gate kernel numerics against blockattn/tolerances/vN.toml (exit 0 pass, 1 numeric failure or "
    "regression, 2 usage/config error); prints a Markdown summary for CI comments"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tolerances", type=_tol_path, required=True, help="shipped version (v5) or vN.toml path"
    )
    p.add_argument(
        "--baseline", type=Path, help="earlier report.json (or report dir) to check for regressions"
    )
    p.add_argument(
        "--report",
        type=Path,
        help="gate an existing run report directory instead of running the corpus",
    )
    p.add_argument("--out", type=Path, help="where to run the corpus (default reports/gate-*)")
    p.add_argument("--under-test", default=None, help="provider judged (default from the file)")
    p.add_argument("--providers", help="comma list of providers to run (default per device)")
    p.add_argument("--max-cases", type=int, help="only the first N corpus cases")
    p.add_argument(
        "--fuzz", type=int, default=0, help="also gate N seeded fuzz cases (default 0: corpus only)"
    )
    p.add_argument("--seed", type=int, default=0, help="fuzz sampler seed (with --fuzz)")
    p.add_argument(
        "--profile", choices=("ci", "gpu", "nightly"), help="fuzz space (default per device)"
    )
    p.add_argument("--no-progress", action="store_true")


def _device_of(records: list[dict]) -> str:
    devs = {r.get("device") for r in records} - {None}
    return "cuda" if "cuda" in devs else "cpu"


def main(args: argparse.Namespace) -> int:
    from blockattn.harness import session, tolerances, verdict
    from blockattn.harness.summarize import (
        elementwise_markdown,
        markdown_tables,
        verdict_markdown,
    )

    tol = tolerances.load(args.tolerances)  # ToleranceError is a ValueError -> exit 2
    problems = tolerances.check_manifest(args.tolerances.parent)
    if problems:
        raise ValueError("; ".join(problems))
    ut = args.under_test or tol.under_test
    baseline_cases = None
    if args.max_cases is not None and args.max_cases < 1:
        raise ValueError(f"--max-cases must be >= 1, got {args.max_cases}: a gate over no case "
                         "shows nothing")
    if args.baseline is not None:
        try:
            baseline_cases = {r["case_id"]: r for r in session.load_report_cases(args.baseline)}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"--baseline {args.baseline}: unreadable ({exc})") from exc
        if not baseline_cases:
            raise ValueError(f"--baseline {args.baseline}: holds no case")
    if args.report is not None:
        records = session.load_report_cases(args.report)
        out = args.report
        if not records:
            raise ValueError(f"{args.report}: no results to gate")
    else:
        from blockattn.commands.run import resolve_plan
        from blockattn.harness.runner import run_cases

        device = session.setup_device()
        ns = argparse.Namespace(
            under_test=ut,
            baseline=None,
            providers=args.providers,
            profile=args.profile,
            corpus_only=args.fuzz == 0,
            fuzz=args.fuzz,
            seed=args.seed,
            max_cases=args.max_cases,
        )
        if args.fuzz < 0:
            raise ValueError(f"--fuzz must be >= 0, got {args.fuzz}")
        ut, bl, provs, _profile, specs = resolve_plan(ns, device)
        out = args.out or session.default_out("gate")
        records = run_cases(
            specs,
            out,
            provider_names=provs,
            under_test=ut,
            baseline=bl,
            tol=tol,
            progress=not args.no_progress,
        )
    verdicts = [verdict.evaluate(r, tol, ut) for r in records]
    # Every failure gets a reproducer + replay command judged by *this* tolerance file.
    from blockattn.harness.runner import write_reproducer

    by_id = {r["case_id"]: r for r in records}
    for v in verdicts:
        if not v.passed:
            rec = by_id[v.case_id]
            try:
                cmd = write_reproducer(Path(out), rec, v.failures, str(args.tolerances))
            except OSError as exc:
                cmd = f"(could not write reproducer: {exc})"
            rec["verdict"] = {**rec.get("verdict", {}), "replay": cmd}
    from blockattn.harness.gate_rules import decide
    from blockattn.harness.selftest import run_selftest

    decision = decide(records, verdicts, baseline_cases, tol, ut)
    if args.baseline is not None and tol.schema < 2:
        decision.reasons.append("schema-1 file: regressions judged on ratio_to_floor only")
    selftest = run_selftest(tol, ut, _device_of(records))
    for p_ in selftest:
        decision.fail(p_)
    regress, missing_in_baseline = decision.regressions, decision.missing_in_baseline
    failed = decision.failed
    bases = {r.get("baseline") for r in records}
    lines = [
        f"## blockattn gate: {'❌ FAIL' if failed else '✅ PASS'}",
        "",
        f"Tolerances `{args.tolerances}` (v{tol.version}, {tol.data['status']}, sha256 "
        f"{tol.sha256[:12]}, calibrated on {tol.data['provenance']['device']}: "
        f"{tol.data['provenance']['gpu']}) · under test `{ut}` · report `{out}`",
    ]
    lines += [f"- ❌ {why}" for why in decision.reasons if decision.failed] or []
    if not selftest and tol.schema >= 2:
        lines.append("\nJudge self-test (known answers, `blockattn/harness/selftest.py`): ✅")
    if tol.data["status"] != "released":
        lines.append("\n> ⚠️ tolerance file is not released (status = proposed)")
    if bases - {tol.baseline}:
        lines.append(
            f"\n> ⚠️ run baseline {sorted(b for b in bases if b)} differs from the "
            f"calibrated baseline `{tol.baseline}`: max_ratio_to_baseline not gated"
        )
    lines += ["", verdict_markdown(verdicts, records)]
    ew = elementwise_markdown(records, under_test=ut)
    if ew:
        lines += ["", ew]
    if baseline_cases is not None:
        lines += [
            "",
            f"### Regressions vs `{args.baseline}`: {len(regress)}"
            + (
                f" ({missing_in_baseline} cases not in the baseline)" if missing_in_baseline else ""
            ),
        ]
        lines += [f"- `{cid}`: {msg}" for cid, msg in regress[:30]]
    lines += [
        "",
        "<details><summary>Error table</summary>",
        "",
        markdown_tables(records),
        "",
        "</details>",
    ]
    md = "\n".join(lines) + "\n"
    try:
        Path(out, "gate.md").write_text(md)
    except OSError as exc:
        print(f"note: could not write {out}/gate.md: {exc}", file=sys.stderr)
    print(md)
    return 1 if failed else 0
