"""`blockattn mutants`: mutation-test the suite with planted kernel bugs (blockattn/mutants/)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from blockattn.judge.tolerances import resolve_path as _tol_path

HELP = (
    "apply each planted bug to a copy of the package, run the quick tier (cpu corpus + seeded "
    "fuzz) against it and report which mutants the suite killed (exit 1 if any survived)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from blockattn.commands._options import int_at_least

    p.add_argument("--mutant", action="append", help="only this mutant (repeatable)")
    p.add_argument(
        "--group", choices=("core", "rotary", "precision", "suite", "contract", "isolation"),
        help="only this group"
    )
    p.add_argument(
        "--baseline",
        type=Path,
        help="baseline report (as for `gate --baseline`): each case is also judged for "
        "elementwise regressions against it",
    )
    p.add_argument("--ci", action="store_true", help="only the CI subset (one per bug class)")
    p.add_argument("--list", action="store_true", help="list the mutants and exit")
    p.add_argument("--fuzz", type=int, default=2, help="seeded fuzz cases after the corpus")
    p.add_argument("--seed", type=int, default=0, help="fuzz sampler seed")
    p.add_argument("--keep-going", action="store_true", help="run every case, not up to a kill")
    p.add_argument("--max-cases", type=int_at_least(1), default=None,
                   help="only the quick tier's first N cases, then the battery (a check of the "
                   "machinery: a mutant only a later case kills survives)")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,  # resolved at run time: the reference page must not depend on the machine
        help="mutants run in parallel (default: half the CPU cores)",
    )
    p.add_argument("--tolerances", type=_tol_path, help="default: newest released for this device")
    from blockattn.commands._options import add_unreleased_option

    add_unreleased_option(p)
    p.add_argument("--no-control", action="store_true", help="skip the unmodified control run")
    p.add_argument("--out", type=Path, help="report dir (mutants.json, mutants.md; the journal "
                   "mutants.journal.jsonl, written as outcomes land)")
    p.add_argument("--resume", action="store_true",
                   help="with --out: keep the outcomes its journal holds from an interrupted run "
                   "of the same plan and run only the rest")


def _markdown(ctrl, outs, meta: dict) -> str:
    killed = sum(o.status == "killed" for o in outs)
    not_run = sum(o.status == "not run" for o in outs)
    also = f", {not_run} not run here (they need an sm_90 GPU or a GPU)" if not_run else ""
    lines = [
        f"## blockattn mutants: {killed}/{len(outs)} killed on {meta['device']} ({meta['gpu']})"
        f"{also}",
        "",
        f"Quick tier: {meta['n_cases']} cases ("
        + (f"the first {meta['max_cases']} of " if meta.get("max_cases") else "")
        + f"cpu corpus + {meta['fuzz']} fuzz, seed {meta['seed']}), tolerances "
        f"`{meta['tolerances']}`, providers {meta['providers']}.",
    ]
    if ctrl is not None:
        lines.append(
            f"Control ({ctrl.name.removeprefix('control (')}: **{ctrl.status}** over "
            f"{ctrl.cases_run} cases"
            + (f" - {ctrl.failure}" if ctrl.failure else "")
        )
    lines += ["", "| mutant | group | result | failing metric | case | s |", "|---" * 6 + "|"]
    for o in outs:
        res = o.status if o.status != "killed" else f"killed ({o.kind})"
        lines.append(
            f"| `{o.name}` | {o.group} | {res} | {o.metric or '-'} | {o.case or '-'} | "
            f"{o.seconds:.1f} |"
        )
    bad = [o for o in outs if o.status != "killed"]
    for o in bad:
        why = f" ({o.detail})" if o.detail else ""
        lines.append(f"\n- `{o.name}` {o.status}: {o.description}{why}")
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
    from blockattn.commands._options import load_tolerances
    from blockattn.mutants import catalog, journal, runner
    from blockattn.run import env, results, session
    from blockattn.run.execute import device_info

    mutants = catalog.by_name(args.mutant)
    if args.group:
        mutants = [m for m in mutants if m.group == args.group]
    if args.ci:
        mutants = [m for m in mutants if m.ci]
    if args.list:
        for m in mutants:
            print(f"{m.name:34s} {m.group:7s} {'ci ' if m.ci else '   '}{m.description}")
        return 0
    if args.fuzz < 0:
        raise ValueError(f"--fuzz must be >= 0, got {args.fuzz}")
    if args.jobs is None:
        args.jobs = max(1, (os.cpu_count() or 2) // 2)
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    if not mutants:
        raise ValueError("no mutant selected (check --mutant/--group/--ci)")
    if args.resume and args.out is None:
        raise ValueError("--resume needs --out (the folder whose journal it continues)")
    device = env.configure()  # no kernel import in this process: workers import the copies
    ns = argparse.Namespace(tolerances=args.tolerances, no_tolerances=False,
                            allow_unreleased_tolerances=args.allow_unreleased_tolerances)
    tol = load_tolerances(ns, device)
    if tol is None:
        raise ValueError("no released tolerance file found: pass --tolerances")
    plan = runner.make_plan(
        device, str(Path(tol.path).resolve()), args.fuzz, args.seed, args.keep_going
    )
    if args.max_cases is not None:
        plan["specs"] = plan["specs"][:args.max_cases]
    if args.baseline is not None:
        if not results.load_report_cases(args.baseline):
            raise ValueError(f"--baseline {args.baseline}: holds no case")
        plan["baseline_report"] = str(args.baseline.resolve())
    info = device_info()
    print(
        f"blockattn mutants: {len(mutants)} mutants x quick tier ({len(plan['specs'])} cases) "
        f"on {info['device']} ({info['gpu']}), {args.jobs} jobs, tolerances {tol.path}",
        file=sys.stderr,
    )
    done: dict = {}
    record = None
    if args.out is not None:
        fp = journal.fingerprint(plan, info, [m.name for m in mutants])
        if args.resume:
            done = journal.load(args.out, fp)
            print(f"resuming: {len(done)} outcomes from {args.out / journal.NAME}",
                  file=sys.stderr)
        else:
            journal.start(args.out, fp)

        def record(outcome, is_control: bool) -> None:
            journal.append(args.out, outcome, is_control)

    ctrl, outs = runner.run_mutants(mutants, plan, args.jobs, control=not args.no_control,
                                    done=done, on_outcome=record)
    meta = {
        **info,
        "tolerances": str(tol.path),
        "baseline_report": plan.get("baseline_report"),
        "n_cases": len(plan["specs"]),
        "max_cases": args.max_cases,
        "fuzz": args.fuzz,
        "seed": args.seed,
        "providers": plan["providers"],
        "command": "blockattn mutants " + " ".join(sys.argv[2:]),
        "finished": session.timestamp(),
    }
    md = _markdown(ctrl, outs, meta)
    print(md)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        payload = {
            "meta": meta,
            "control": ctrl.to_dict() if ctrl else None,
            "mutants": [o.to_dict() for o in outs],
        }
        (args.out / "mutants.json").write_text(json.dumps(payload, indent=1))
        (args.out / "mutants.md").write_text(md)
    if ctrl is not None and ctrl.status != "passed":
        print(
            f"error: the unmodified control did not pass the quick tier ({ctrl.status}: "
            f"{ctrl.failure or ctrl.detail}); kills are meaningless",
            file=sys.stderr,
        )
        return 1
    if not any(o.status == "killed" for o in outs):
        print("error: no mutant ran here (every selected one needs an sm_90 GPU or a GPU)",
              file=sys.stderr)
        return 1
    # "not run" (a path this device cannot run) is reported above, never counted as killed
    return 0 if all(o.status in ("killed", "not run") for o in outs) else 1
