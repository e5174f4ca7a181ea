"""`blockattn gate`: CI decision - corpus results vs a tolerance file (and an earlier report)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from blockattn.judge.tolerances import resolve_path as _tol_path

HELP = (
    "gate kernel numerics against blockattn/tolerances/vN.toml (exit 0 pass, 1 numeric failure or "
    "regression, 2 usage/config error); prints a Markdown summary for CI comments"
)


DEFAULT_GATE_FUZZ = {"cpu": 4, "cuda": 12}  # fuzz cases beside the corpus, per device


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tolerances", type=_tol_path, default=None,
        help="shipped version (v5) or a file path (default: the newest released for the device "
             "that ran the cases; printed)",
    )  # fmt: skip
    p.add_argument(
        "--baseline", type=Path, help="earlier report.json (or report dir) to check for regressions"
    )
    p.add_argument(
        "--report",
        type=Path,
        help="gate an existing run report directory instead of running the corpus",
    )
    from blockattn.commands._options import (
        add_provider_option,
        add_selection_options,
        add_unreleased_option,
        int_at_least,
    )

    add_unreleased_option(p)
    from blockattn.commands._options import add_isolation_options

    add_isolation_options(p)

    p.add_argument("--out", type=Path, help="where to run the corpus (default reports/gate-*)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted gate in --out (same options)")  # fmt: skip
    add_provider_option(p)
    p.add_argument(
        "--under-test", default=None,
        help="provider judged (default: the first --provider, else the file's under_test)",
    )  # fmt: skip
    p.add_argument("--providers", help="comma list of providers to run (default per device)")
    p.add_argument("--max-cases", type=int_at_least(1), help="only the first N corpus cases")
    p.add_argument(
        "--fuzz", type=int_at_least(0), default=None,
        help="also gate N fuzz cases drawn from --seed (default "
        f"{DEFAULT_GATE_FUZZ['cpu']} on CPU, {DEFAULT_GATE_FUZZ['cuda']} on a GPU: answers "
        "learned from the public corpus do not pass; 0: corpus only)",
    )  # fmt: skip
    p.add_argument("--fuzz-only", action="store_true", help="no corpus cases (needs --fuzz N)")
    p.add_argument("--seed", type=int_at_least(0), default=None,
                   help="fuzz sampler seed (default: drawn at run time, printed and recorded in "
                   "run.json; --resume reuses the run's)")  # fmt: skip
    p.add_argument(
        "--profile", choices=("ci", "gpu", "nightly"), help="fuzz space (default per device)"
    )
    add_selection_options(p)
    p.add_argument("--no-progress", action="store_true")
    from blockattn.commands.contract import add_option as add_contract_option

    add_contract_option(p)


def _device_of(records: list[dict]) -> str:
    devs = {r.get("device") for r in records} - {None}
    return "cuda" if "cuda" in devs else "cpu"


def main(args: argparse.Namespace) -> int:
    from blockattn.commands._options import load_tolerances
    from blockattn.judge import verdict
    from blockattn.report import report_json
    from blockattn.report.summarize import (
        elementwise_markdown,
        markdown_tables,
        md_inline,
        safe_contract_markdown,
        verdict_markdown,
    )
    from blockattn.run import results, session

    # The newest released file for the device that ran (or will run) the cases; a file that is
    # not released is refused unless --allow-unreleased-tolerances (ToleranceError -> exit 2).
    if args.tolerances is None and args.report is not None:
        tol_device = _device_of(results.load_report_cases(args.report))
    else:
        tol_device = "cuda" if __import__("torch").cuda.is_available() else "cpu"
    tol = load_tolerances(args, tol_device)
    args.tolerances = tol.path

    from blockattn.commands._options import load_provider_specs

    outside = load_provider_specs(args.provider)
    ut = args.under_test or (outside[0] if outside else None)  # None: decided below
    baseline_cases = None
    base_warn: list[str] = []  # a baseline of another GPU, tolerance or corpus version
    if args.in_process:
        raise ValueError("--in-process: the gate refuses to judge a kernel that runs in its own "
                         "process (debug it with `blockattn run --in-process`)")  # fmt: skip
    _draw_fuzz(args)
    if args.fuzz_only and not args.fuzz:
        raise ValueError("--fuzz-only needs --fuzz N (N >= 1): a gate over no case shows nothing")
    if args.baseline is not None:
        try:
            baseline_cases = {r["case_id"]: r for r in results.load_report_cases(args.baseline)}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"--baseline {args.baseline}: unreadable ({exc})") from exc
        if not baseline_cases:
            raise ValueError(f"--baseline {args.baseline}: holds no case")
    if args.report is not None:
        # Fails closed: a directory a run still holds, a torn line or a planned case with no
        # record is refused (exit 2), never gated as if the cases it lacks had passed.
        session.check_not_in_use(args.report, "gate --report")
        records = results.load_report_cases(args.report)
        out = args.report
        if not records:
            raise ValueError(f"{args.report}: no results to gate")
        if Path(args.report).is_dir():
            torn: list[int] = []
            if (Path(args.report) / results.RESULTS).exists():
                results.load_records(args.report, torn)
            incomplete = session.completeness(args.report, records, torn)
            if incomplete:
                raise ValueError(f"--report {args.report}: not a complete run, refused: "
                                 + "; ".join(incomplete) + "; finish it (its own command "
                                 f"with --out {args.report} --resume), then gate it")  # fmt: skip
        if baseline_cases is not None:  # refused (exit 2) where the comparison is meaningless
            from blockattn.report import baseline as _base

            here = {**_base.side(records, _base._meta_of(args.report)), "tolerances": [tol.version]}
            base_warn = _base.require_comparable(args.baseline, baseline_cases, here,
                                                 [r["case_id"] for r in records])  # fmt: skip
        # Default: the file's kernel under test; a report that never ran it (an outside
        # kernel's run) is judged for the kernel its records were run for.
        ran = {p for r in records for p in r.get("providers", {})}
        uts = {r.get("under_test") for r in records} - {None}
        if ut is None:
            ut = tol.under_test if tol.under_test in ran or len(uts) != 1 else uts.pop()
        _clear_stale_reproducers(Path(out))
    else:
        from blockattn.commands.run import resolve_plan

        device = session.setup_device()
        ut = ut or tol.under_test
        ns = argparse.Namespace(**{
            **vars(args), "provider": None, "outside": outside,  # loaded above
            "under_test": ut, "baseline": None, "corpus_only": args.fuzz == 0, "shape_p": False,
        })  # fmt: skip
        ut, bl, provs, profile, specs = resolve_plan(ns, device)
        if not specs:
            raise ValueError("no case to gate: the filters/shard select none of the plan")
        if baseline_cases is not None:  # refused before the run where it cannot compare
            from blockattn.cases.corpus import CORPUS_VERSION
            from blockattn.report import baseline as _base
            from blockattn.run.execute import device_info

            here = {"device": device, "gpu": device_info()["gpu"], "tolerances": [tol.version],
                    "corpus_version": CORPUS_VERSION}  # fmt: skip
            base_warn = _base.require_comparable(args.baseline, baseline_cases, here,
                                                 [s.case_id for s in specs])  # fmt: skip
        from blockattn.commands.run import check_resume, run_interruptible, run_options

        check_resume(args, "gate")
        out = args.out or session.default_out("gate")

        session.check_run_options(out, run_options(ns, ut, bl, provs, profile, tol), args.resume,
                                  planned=[s.case_id for s in specs],
                                  identity=session.run_identity(provs))  # fmt: skip
        _clear_stale_reproducers(Path(out))
        records = run_interruptible(ns, specs, out, provs, ut, bl, tol)
        if records is None:
            return 130
    verdicts = [verdict.evaluate(r, tol, ut) for r in records]
    from blockattn.judge.gate_rules import decide
    from blockattn.judge.selftest import run_selftest
    from blockattn.pipeline import write_reproducer

    decision = decide(records, verdicts, baseline_cases, tol, ut)
    unisolated = _not_isolated(records, ut)
    if unisolated:  # the kernel could have reached the judge: its verdicts vouch for nothing
        decision.fail(f"NOT ISOLATED: {len(unisolated)} case(s) ran {ut!r} in the judge's own "
                      f"process (--in-process, or a run by an older blockattn), e.g. "
                      f"{unisolated[0]}; the gate judges only runs whose kernel ran in a worker")
    # Every failing case gets a reproducer + replay command judged by *this* tolerance file:
    # numeric failures and regression-only ones alike (replay shows the metrics compared).
    by_id = {r["case_id"]: r for r in records}
    why: dict[str, list[str]] = {v.case_id: list(v.failures) for v in verdicts if not v.passed}
    for cid, msg in decision.regressions:
        why.setdefault(cid, []).append(f"regression vs {args.baseline}: {msg}")
    for cid, failures in why.items():
        rec = by_id[cid]
        try:
            cmd = write_reproducer(Path(out), rec, failures, str(args.tolerances))
        except OSError as exc:
            cmd = f"(could not write reproducer: {exc})"
        rec["verdict"] = {**rec.get("verdict", {}), "replay": cmd}
    if args.baseline is not None and tol.schema < 2:
        decision.reasons.append("schema-1 file: regressions judged on ratio_to_floor only")
    selftest = run_selftest(tol, ut, _device_of(records), records)
    for p_ in selftest:
        decision.fail(p_)
    from blockattn.commands.contract import section as contract_section

    # The battery calls the kernel on this machine (configured here in --report mode too).
    dev = "cpu" if args.no_contract else session.setup_device()
    from blockattn.run import isolated
    from blockattn.run import results as run_results

    sealed = run_results.file_bytes(Path(out) / "results.jsonl")
    contract, contract_md, contract_bad = contract_section(ut, tol, dev, skip=args.no_contract)
    from blockattn.report import triage

    first = triage.clean_cases_line(verdicts)  # wrong on the clean cases: said first
    if first:
        decision.reasons.insert(0, first)
    for line in triage.contract_lines(contract, contract_bad):  # layout bugs only as such
        decision.fail(line)
    # No kernel runs past this point: its worker and every process it started are ended
    # before the verdict is written, and the records must be those the judge wrote.
    for line in isolated.end_worker():
        decision.fail(line)
    if run_results.file_bytes(Path(out) / "results.jsonl") != sealed:
        decision.fail("results.jsonl changed while the kernel ran (after its cases were "
                      "written): the records are not the judge's")  # fmt: skip
    regress, missing_in_baseline = decision.regressions, decision.missing_in_baseline
    failed = decision.failed
    bases = {r.get("baseline") for r in records}
    lines = [
        f"## blockattn gate: {'❌ FAIL' if failed else '✅ PASS'}"
        + (" (UNRELEASED tolerances)" if tol.released_as is None else ""),
        "",
        f"Tolerances `{args.tolerances}` ({tol.label}, status {tol.data['status']}, sha256 "
        f"{tol.sha256[:12]}, calibrated on {tol.data['provenance']['device']}: "
        f"{tol.data['provenance']['gpu']}) · under test `{ut}` · report `{out}`",
    ]
    # the reasons quote the kernel (exception messages, contract details): escaped
    lines += [f"- ❌ {md_inline(why)}" for why in decision.reasons if decision.failed] or []
    if not selftest and tol.schema >= 2:
        lines.append("\nJudge self-test (known answers, `blockattn/judge/selftest.py`): ✅")
    if tol.released_as is None:
        lines.append(f"\n> ⚠️ UNRELEASED tolerance file (sha256 {tol.sha256}): its verdicts are "
                     "vouched for by nobody but whoever wrote it")  # fmt: skip
    if bases - {tol.baseline}:
        lines.append(
            f"\n> ⚠️ run baseline {sorted(b for b in bases if b)} differs from the "
            f"calibrated baseline `{tol.baseline}`: max_ratio_to_baseline not gated"
        )
    lines += ["", verdict_markdown(verdicts, records), "",
              safe_contract_markdown(contract, contract_md, ut)]  # fmt: skip
    ew = elementwise_markdown(records, under_test=ut)
    if ew:
        lines += ["", ew]
    if baseline_cases is not None:
        base_uts = sorted({str(r.get("under_test")) for r in baseline_cases.values()})
        if base_uts != [ut]:
            lines += ["", f"> ⚠️ the baseline's kernel under test is {base_uts} and this run's is "
                          f"`{ut}`: compared by role (the kernel under test of each case)"]
        lines += [f"\n> ⚠️ {w}" for w in base_warn]
        for w in base_warn:
            print(f"warning: --baseline {args.baseline}: {w}", file=sys.stderr)
        lines += [
            "",
            f"### Regressions vs `{args.baseline}`: {len(regress)}"
            + (
                f" ({missing_in_baseline} cases not in the baseline)" if missing_in_baseline else ""
            ),
        ]
        lines += [f"- `{cid}`: {md_inline(msg)}" for cid, msg in regress[:30]]
        for cid in dict.fromkeys(c for c, _ in regress[:30]):
            lines.append(f"  - replay `{cid}`: `{by_id[cid]['verdict']['replay']}`")
    lines += [
        "",
        "<details><summary>Error table</summary>",
        "",
        markdown_tables(records),
        "",
        "</details>",
    ]
    md = "\n".join(lines) + "\n"
    if args.report is None:  # the gate ran the cases: its directory gets a full report.json
        from blockattn.run.execute import device_info, git_commit

        meta = {
            **device_info(), "commit": git_commit(), "kind": "gate", "under_test": ut,
            "providers": sorted({p for r in records for p in r["providers"]}),
            "tolerances": str(args.tolerances), "tolerances_sha256": tol.sha256,
            "tolerances_released": tol.released_as is not None,
            "corpus_version": _corpus_version(),
            "baseline_report": str(args.baseline) if args.baseline else None,
            "command": session.command_line(args),
            "provider_specs": session.provider_specs(sorted({p for r in records
                                                             for p in r["providers"]})),
            "n_cases": len(records), "finished": session.timestamp(),
            "decision": {"failed": failed, "reasons": decision.reasons},
        }  # fmt: skip
        report_json.write_report_json(Path(out), records, meta, {"contract": contract})
    try:
        Path(out, "gate.md").write_text(md)
    except OSError as exc:
        print(f"note: could not write {out}/gate.md: {exc}", file=sys.stderr)
    print(md)
    return 1 if failed else 0


def _not_isolated(records: list[dict], ut: str) -> list[str]:
    """Case ids whose kernel under test was called in the judge's own process."""
    return [r["case_id"] for r in records
            if (p := r.get("providers", {}).get(ut)) and p.get("status") != "unsupported"
            and p.get("isolation") != "worker"]  # fmt: skip


def _draw_fuzz(args: argparse.Namespace) -> None:
    """--fuzz and --seed defaults: a few fuzz cases from a seed drawn now (or the resumed run's),
    so a kernel holding a table of the public corpus' answers does not pass."""
    import json
    import secrets

    if args.report is not None:
        return
    if args.fuzz is None:
        dev = "cuda" if __import__("torch").cuda.is_available() else "cpu"
        args.fuzz = DEFAULT_GATE_FUZZ[dev]
    if args.seed is None and args.fuzz:
        old = Path(args.out or "") / "run.json"
        if args.resume and old.is_file():
            args.seed = json.loads(old.read_text()).get("seed")
        if args.seed is None:
            args.seed = secrets.randbelow(2**31)
            print(f"blockattn gate: fuzz seed {args.seed} (drawn now; --seed {args.seed} repeats "
                  "these cases)", file=sys.stderr)  # fmt: skip
    args.seed = args.seed or 0


def _clear_stale_reproducers(out: Path) -> None:
    """repro/ holds this gate's failures only: an earlier gate's files would pass for them."""
    rdir = out / "repro"
    if rdir.is_dir():
        for f in rdir.glob("*.json"):
            f.unlink()


def _corpus_version() -> int:
    from blockattn.cases.corpus import CORPUS_VERSION

    return CORPUS_VERSION
