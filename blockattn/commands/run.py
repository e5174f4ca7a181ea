"""`blockattn run`: corpus + fuzz cases, kernel vs baselines vs FP64 oracle, streamed report dir."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from blockattn.judge.tolerances import resolve_path as _tol_path

HELP = (
    "run the verification suite (corpus + fuzz) on the available device and write a "
    "report directory (results.jsonl, report.json, summary.md)"
)

DEFAULT_FUZZ = {"ci": 8, "gpu": 60, "nightly": 1000}


class _OldBaselineSpelling(argparse.Action):
    """`run --baseline NAME` (a provider): still accepted, with a warning naming the new
    spelling, since `--baseline` is a report directory on gate, mutants and the CI scripts."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # type: ignore[override]
        print(f"warning: `{option_string} {values}` is now `--baseline-provider {values}` "
              "(--baseline names a report directory on gate, mutants and the CI scripts); "
              "the old spelling will go", file=sys.stderr)  # fmt: skip
        setattr(namespace, self.dest, values)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from blockattn.commands._options import (
        add_provider_option,
        add_selection_options,
        add_unreleased_option,
        int_at_least,
    )

    p.add_argument("--out", type=Path, help="report directory (default reports/run-<timestamp>)")
    p.add_argument(
        "--profile",
        choices=("ci", "gpu", "nightly"),
        help="fuzz space/size (default: ci on CPU, gpu on CUDA)",
    )
    p.add_argument("--fuzz", type=int_at_least(0), help="fuzz cases (default per profile)")
    p.add_argument("--seed", type=int_at_least(0), default=0, help="fuzz sampler seed")
    p.add_argument(
        "--max-cases", type=int_at_least(1), help="stop after this many cases (corpus first)"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--corpus-only", action="store_true", help="no fuzz cases")
    mode.add_argument("--fuzz-only", action="store_true", help="no corpus cases")
    p.add_argument(
        "--shape-p",
        action="store_true",
        help="also run the production shape P (B=1152, max_len=4096, sparsity 0.7, H=4, D=128, "
        "bf16; plain and rotary); needs a GPU with ~40 GB free",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="skip cases already in --out (needs --out; refuses a dir run with other options)",
    )
    add_provider_option(p)
    p.add_argument("--providers", help="comma list (default: kernel under test + device baseline)")
    p.add_argument("--under-test", default=None, help="provider judged (default blockattn)")
    p.add_argument("--baseline-provider", dest="baseline", default=None, metavar="NAME",
                   help="baseline provider run beside the kernel (default fa2 / eager); not "
                   "gate's --baseline, which names a report directory")  # fmt: skip
    p.add_argument("--baseline", dest="baseline", action=_OldBaselineSpelling,
                   help=argparse.SUPPRESS)  # the old spelling: works, and says the new one
    p.add_argument(
        "--tolerances",
        type=_tol_path,
        help="tolerance file for per-case verdicts (default: latest released)",
    )
    p.add_argument("--no-tolerances", action="store_true", help="record metrics only")
    add_unreleased_option(p)
    from blockattn.commands._options import add_isolation_options

    add_isolation_options(p)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--no-selfcheck", action="store_true", help="skip the oracle self-check")
    from blockattn.commands.contract import add_option as add_contract_option

    add_contract_option(p)
    add_selection_options(p)


def resolve_plan(args: argparse.Namespace, device: str):
    """(under test, baseline, providers, profile, specs) from the options of run/gate/false-alarms.

    `--provider` specs are loaded (registered) here; the first is under test by default.
    """
    from blockattn import providers
    from blockattn.cases import plan

    # --provider specs (loaded here), or names a caller already loaded (gate)
    from blockattn.commands._options import isolate, load_provider_specs, selection_from
    from blockattn.run import execute

    outside = [*getattr(args, "outside", []),
               *load_provider_specs(getattr(args, "provider", None))]  # fmt: skip
    ut, bl, provs = execute.default_providers(device)
    if outside:
        ut, provs = outside[0], [*outside, bl]
    ut = args.under_test or ut
    if ut == bl and not args.baseline:  # `--provider fa2` on a GPU: judge it against eager
        bl = next(p for p in ("eager", "fa2") if p != ut)
    bl = args.baseline or bl
    if args.providers:
        provs = [s.strip() for s in args.providers.split(",") if s.strip()]
    for name in {ut, bl, *provs}:
        providers.get(name)  # ValueError (exit 2) on a typo
    provs = list(dict.fromkeys([ut, bl, *provs]))
    isolate(provs)  # every kernel-role provider runs in the worker; baselines stay here
    profile = args.profile or ("gpu" if device == "cuda" else "ci")
    corpus_only = getattr(args, "corpus_only", False)
    if corpus_only and getattr(args, "fuzz", None):
        raise ValueError(f"--corpus-only with --fuzz {args.fuzz}: pick one")
    if args.max_cases is not None and args.max_cases < 0:
        raise ValueError("--max-cases must be >= 0")
    n = 0 if corpus_only else (DEFAULT_FUZZ[profile] if args.fuzz is None else args.fuzz)
    specs = plan.plan_specs(
        device,
        profile=profile,
        under_test_supports=providers.get(ut).supports,
        fuzz=n,
        seed=args.seed,
        corpus=not getattr(args, "fuzz_only", False),
        shape_p=getattr(args, "shape_p", False),
        selection=selection_from(args),
        max_cases=args.max_cases,
    )
    return ut, bl, provs, profile, specs


def selfcheck_section(device: str) -> list[dict] | None:
    try:
        from oracles.selfcheck import run_selfchecks
    except ImportError:
        return None
    try:
        return run_selfchecks(device)
    except Exception as exc:  # report, don't crash the run
        return [
            {
                "name": "selfcheck",
                "value": None,
                "bound": None,
                "passed": False,
                "detail": f"{type(exc).__name__}: {exc}",
            }
        ]


def run_options(args: argparse.Namespace, ut: str, bl: str, provs: list[str], profile: str,
                tol) -> dict:  # fmt: skip
    """What decides a run's cases and verdicts: `--resume` must continue with the same."""
    from blockattn.commands._options import selection_from

    return {
        "under_test": ut, "baseline": bl, "providers": provs, "profile": profile,
        "fuzz": args.fuzz, "seed": args.seed, "corpus_only": args.corpus_only,
        "fuzz_only": args.fuzz_only, "shape_p": args.shape_p, "max_cases": args.max_cases,
        "selection": selection_from(args).to_dict(),
        "tolerances_sha256": tol.sha256 if tol else None,
    }  # fmt: skip


def check_resume(args: argparse.Namespace, what: str) -> None:
    """`--resume` (run, gate) needs --out naming a directory that holds a run to continue."""
    if args.resume and args.out is None:
        raise ValueError(f"--resume needs --out DIR: the directory of the {what} to continue")
    if args.resume and not (Path(args.out) / "results.jsonl").is_file():
        raise ValueError(f"--resume: {args.out} holds no {what} to continue (no results.jsonl); "
                         f"drop --resume to start a new {what} there")  # fmt: skip


def run_interruptible(args: argparse.Namespace, specs: list, out: Path, provs: list[str],
                      ut: str, bl: str, tol) -> list[dict] | None:  # fmt: skip
    """The cases run (or continued with --resume) into `out`; on Ctrl-C, one line naming the
    command that continues them, and None (every finished case is already fsynced)."""
    from blockattn.pipeline import run_cases
    from blockattn.run import session

    try:
        return run_cases(specs, out, provider_names=provs, under_test=ut, baseline=bl,
                         resume=args.resume, tol=tol, progress=not args.no_progress)  # fmt: skip
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished cases are in {out}/results.jsonl; `blockattn report "
              f"{out}` renders them; continue with: {session.resume_command(args, out)}",
              file=sys.stderr)  # fmt: skip
        return None


def main(args: argparse.Namespace) -> int:
    from blockattn.cases.corpus import CORPUS_VERSION
    from blockattn.judge import verdict
    from blockattn.report import report_json
    from blockattn.run import session
    from blockattn.run.execute import device_info, git_commit

    device = session.setup_device()
    check_resume(args, "run")
    from blockattn.commands._options import load_tolerances

    tol = load_tolerances(args, device)
    ut, bl, provs, profile, specs = resolve_plan(args, device)
    if not specs:
        raise ValueError("no case to run: the filters/shard select none of the plan")
    out = args.out or session.default_out("run")
    info = device_info()
    # Refusals first (nothing written); then the lock, and run.json with the planned case ids
    # and the identity of the kernels, device and versions (--resume refuses any change).
    session.check_run_options(out, run_options(args, ut, bl, provs, profile, tol), args.resume,
                              planned=[s.case_id for s in specs],
                              identity=session.run_identity(provs, info))  # fmt: skip
    print(
        f"blockattn run: {len(specs)} cases on {info['device']} ({info['gpu']}), "
        f"providers {provs}, under test {ut}, baseline {bl}, profile {profile}, "
        f"tolerances {tol.path if tol else 'none'}"
        f"{' (UNRELEASED)' if tol and tol.released_as is None else ''} -> {out}",
        file=sys.stderr,
    )
    records = run_interruptible(args, specs, out, provs, ut, bl, tol)
    if records is None:
        return 130  # 128 + SIGINT, the shell convention for an interrupted command
    # Ctrl-C from here on (the battery, the reports) says where the complete results are
    session.say_on_interrupt(session.after_cases_note(out, records, args))
    checks = None if args.no_selfcheck else selfcheck_section(device)
    from blockattn.commands.contract import section as contract_section
    from blockattn.run import isolated
    from blockattn.run import results as run_results

    sealed = run_results.file_bytes(Path(out) / "results.jsonl")
    contract, contract_md, contract_bad = contract_section(
        ut, tol, device, skip=getattr(args, "no_contract", False))
    # no kernel runs past this point (its worker and strays are ended), and the records must
    # be the ones the judge wrote
    contract_bad = [*contract_bad, *isolated.end_worker()]
    if run_results.file_bytes(Path(out) / "results.jsonl") != sealed:
        contract_bad.append("results.jsonl changed while the kernel ran (after its cases were "
                            "written): the records are not the judge's")  # fmt: skip
    sb = isolated.active()
    if sb is not None and sb.in_process:
        contract_md = (f"### ⚠️ {isolated.NOT_ISOLATED}: the kernel ran in the judge's own "
                       "process (--in-process)\n\n" + contract_md)
    meta = {
        **info,
        "commit": git_commit(),
        "profile": profile,
        "under_test": ut,
        "baseline": bl,
        "providers": provs,
        "tolerances": str(tol.path) if tol else None,
        "tolerances_sha256": tol.sha256 if tol else None,
        "tolerances_released": (tol.released_as is not None) if tol else None,
        "corpus_version": CORPUS_VERSION,
        "command": session.command_line(args),
        "provider_specs": session.provider_specs(provs),
        "n_cases": len(records),
        "finished": session.timestamp(),
    }
    verdicts = [verdict.evaluate(r, tol, ut) for r in records] if tol else []
    report_json.write_report_json(out, records, meta, {"selfcheck": checks,
                                                       "contract": contract})  # fmt: skip
    from blockattn.report.summarize import run_summary_markdown

    summary = run_summary_markdown(
        info=info, commit=meta["commit"], tol=tol, under_test=ut, verdicts=verdicts,
        records=records, contract_md=contract_md, contract_bad=contract_bad, checks=checks,
        contract=contract,
    )  # fmt: skip
    (out / "summary.md").write_text(summary)
    print(summary)
    print(f"\nreport: {out}/summary.md  (plots: blockattn report {out})", file=sys.stderr)
    failed = any(not v.passed for v in verdicts)
    failed = failed or any(not c.get("passed", True) for c in checks or [])
    if tol and not any(not v.skipped for v in verdicts):  # fail closed: nothing was judged
        why = sorted({str(r["providers"].get(ut, {}).get("reason", "")) for r in records})
        print(f"FAIL zero cases judged for {ut!r} ({len(records)} run, none supported here): "
              f"{'; '.join(w for w in why[:2] if w)}", file=sys.stderr)  # fmt: skip
        failed = True
    for line in contract_bad:
        print(f"FAIL {line}", file=sys.stderr)
    session.say_on_interrupt(None)
    return 1 if failed or contract_bad else 0
