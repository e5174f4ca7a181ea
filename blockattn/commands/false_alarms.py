"""`blockattn false-alarms`: the gate on unmodified code over many fuzz seeds must never fail."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from blockattn.judge.tolerances import resolve_path as _tol_path

HELP = (
    "run the gate's plan (corpus once + seeded fuzz) on the unmodified kernels over N fuzz seeds "
    "and report every failure: a gate that fails here would be a false alarm (exit 1)"
)
# Default first seed: held out from the seeds the released tolerance files were calibrated on
# (v1: fuzz seeds 1 and 2, v2: 3 and 4), so the check is out of sample.
FIRST_SEED = 100


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=int, default=20, help="number of fuzz seeds")
    p.add_argument("--first-seed", type=int, default=FIRST_SEED, help="seeds first..first+N-1")
    p.add_argument("--fuzz", type=int, default=4, help="fuzz cases per seed")
    p.add_argument("--profile", choices=("ci", "gpu", "nightly"), help="fuzz space (per device)")
    p.add_argument("--providers", help="comma list (default: the gate's, per device)")
    p.add_argument("--no-corpus", action="store_true", help="skip the corpus (run it once else)")
    p.add_argument(
        "--every-distribution",
        action="store_true",
        help="run each fuzz draw once per input distribution (6x the cases): no distribution "
        "is left to the sampler's luck",
    )
    p.add_argument("--tolerances", type=_tol_path, help="default: newest released for this device")
    from blockattn.commands._options import add_unreleased_option

    add_unreleased_option(p)
    p.add_argument("--out", type=Path, help="report dir (default reports/false-alarms-*)")
    p.add_argument("--no-progress", action="store_true")


def _every_distribution(specs: list) -> list:
    """Each fuzz spec once per input distribution (corpus specs unchanged)."""
    import dataclasses

    from blockattn.cases.generate import DISTRIBUTIONS

    out = []
    for s in specs:
        if s.source != "fuzz":
            out.append(s)
            continue
        out += [dataclasses.replace(s, distribution=d) for d in DISTRIBUTIONS]
    return out


def main(args: argparse.Namespace) -> int:
    from blockattn.commands._options import load_tolerances
    from blockattn.commands.run import resolve_plan
    from blockattn.judge import gate_rules, verdict
    from blockattn.pipeline import run_cases
    from blockattn.run import session
    from blockattn.run.execute import device_info, git_commit

    for name in ("seeds", "fuzz"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}")
    device = session.setup_device()
    tol = load_tolerances(argparse.Namespace(
        tolerances=args.tolerances,
        allow_unreleased_tolerances=args.allow_unreleased_tolerances), device)
    if tol is None:
        raise ValueError("no released tolerance file found: pass --tolerances")
    out = args.out or session.default_out("false-alarms")
    info = device_info()
    rows, failures = [], []
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for i, seed in enumerate(seeds):
        ns = argparse.Namespace(
            under_test=None,
            baseline=None,
            providers=args.providers,
            profile=args.profile,
            corpus_only=False,
            fuzz=args.fuzz,
            seed=seed,
            max_cases=None,
        )
        ut, bl, provs, profile, specs = resolve_plan(ns, device)
        if args.every_distribution:
            specs = _every_distribution(specs)
        if i > 0 or args.no_corpus:
            specs = [s for s in specs if s.source != "corpus"]  # deterministic: gate it once
        records = run_cases(
            specs,
            out / f"seed-{seed}",
            provider_names=provs,
            under_test=ut,
            baseline=bl,
            tol=tol,
            progress=not args.no_progress,
        )
        vs = [verdict.evaluate(r, tol, ut) for r in records]
        bad = [v for v in vs if not v.passed]
        failures += [{"seed": seed, "case_id": v.case_id, "failures": v.failures} for v in bad]
        # a baseline beyond its own bound fails the gate although every case passes: an alarm
        base_bad = gate_rules.baseline_failures(records, vs, ut)
        failures += [{"seed": seed, "case_id": case, "failures": [why], "baseline": True}
                     for case, why in base_bad]  # fmt: skip
        # everything that shapes the seed's plan and its verdict, so the line reruns these cases
        same = (f" --profile {profile}" + (f" --providers {args.providers}" if args.providers
                                           else "")
                + (" --allow-unreleased-tolerances" if args.allow_unreleased_tolerances else ""))
        cmd = (
            f"blockattn false-alarms --tolerances {tol.path} --fuzz {args.fuzz} --seeds 1 "
            f"--first-seed {seed} --every-distribution" + same
            if args.every_distribution
            else f"blockattn gate --tolerances {tol.path} --fuzz {args.fuzz} --seed {seed}" + same
        )
        rows.append(
            {
                "seed": seed,
                "cases": len(vs),
                "passed": sum(v.passed and not v.skipped for v in vs),
                "skipped": sum(v.skipped and v.passed for v in vs),
                "failed": len(bad),
                "baseline_failed": len({case for case, _ in base_bad}),
                "gate_command": cmd,
            }
        )
        print(f"seed {seed}: {rows[-1]['failed']} failed / {len(vs)} cases, baseline beyond "
              f"its bound on {rows[-1]['baseline_failed']}", file=sys.stderr)  # fmt: skip
    total = sum(r["cases"] for r in rows)
    verdict_line = "✅ no false alarm" if not failures else f"❌ {len(failures)} alarms"
    md = [
        f"## blockattn false-alarms: {verdict_line} over {args.seeds} fuzz seeds",
        "",
        f"{info['device']} ({info['gpu']}), commit {git_commit()}, tolerances `{tol.path}` "
        f"(v{tol.version}), {total} cases ({args.fuzz} fuzz per seed"
        + ("" if args.no_corpus else " + the corpus once")
        + ")",
        "",
        "| seed | cases | passed | skipped (unsupported) | failed | baseline beyond its bound "
        "| reproduce with the gate |",
        "|---|---|---|---|---|---|---|",
    ]
    md += [
        f"| {r['seed']} | {r['cases']} | {r['passed']} | {r['skipped']} | {r['failed']} | "
        f"{r['baseline_failed']} | `{r['gate_command']}` |"
        for r in rows
    ]
    md += [f"- seed {f['seed']} `{f['case_id']}`: {f['failures'][0]}" for f in failures[:30]]
    text = "\n".join(md) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "false_alarms.md").write_text(text)
    meta = {**info, "commit": git_commit(), "tolerances": str(tol.path), "finished": None}
    meta["finished"] = session.timestamp()
    payload = {"meta": meta, "seeds": rows, "failures": failures}
    (out / "false_alarms.json").write_text(json.dumps(payload, indent=1))
    print(text)
    return 1 if failures else 0
