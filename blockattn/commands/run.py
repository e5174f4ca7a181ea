"""`blockattn run`: corpus + fuzz cases, kernel vs baselines vs FP64 oracle, streamed report dir."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = (
    "run the verification suite (corpus + fuzz) on the available device and write a "
    "report directory (results.jsonl, report.json, summary.md)"
)

DEFAULT_FUZZ = {"ci": 8, "gpu": 60, "nightly": 1000}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, help="report directory (default reports/run-<timestamp>)")
    p.add_argument(
        "--profile",
        choices=("ci", "gpu", "nightly"),
        help="fuzz space/size (default: ci on CPU, gpu on CUDA)",
    )
    p.add_argument("--fuzz", type=int, help="number of fuzz cases (default per profile)")
    p.add_argument("--seed", type=int, default=0, help="fuzz sampler seed")
    p.add_argument("--max-cases", type=int, help="stop after this many cases (corpus first)")
    p.add_argument("--corpus-only", action="store_true")
    p.add_argument(
        "--shape-p",
        action="store_true",
        help="also run the production shape P (B=1152, max_len=4096, sparsity 0.7, H=4, D=128, "
        "bf16; plain and rotary); needs a GPU with ~40 GB free",
    )
    p.add_argument("--resume", action="store_true", help="skip cases already in --out")
    p.add_argument("--providers", help="comma list (default: blockattn + device baseline)")
    p.add_argument("--under-test", default=None, help="provider judged (default blockattn)")
    p.add_argument("--baseline", default=None, help="baseline provider (default fa2 / eager)")
    p.add_argument(
        "--tolerances",
        type=Path,
        help="tolerance file for per-case verdicts (default: latest released)",
    )
    p.add_argument("--no-tolerances", action="store_true", help="record metrics only")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--no-selfcheck", action="store_true", help="skip the oracle self-check")


def resolve_plan(args: argparse.Namespace, device: str):
    from blockattn.harness import providers, runner, strategies
    from blockattn.harness.corpus import corpus_for_device

    ut, bl, provs = runner.default_providers(device)
    ut = args.under_test or ut
    bl = args.baseline or bl
    if args.providers:
        provs = [s.strip() for s in args.providers.split(",") if s.strip()]
    for name in {ut, bl, *provs}:
        providers.get(name)  # ValueError (exit 2) on a typo
    provs = list(dict.fromkeys([ut, bl, *provs]))
    profile = args.profile or ("gpu" if device == "cuda" else "ci")
    specs = corpus_for_device(device)
    if getattr(args, "shape_p", False):
        specs += shape_p_specs()
    if not args.corpus_only:
        n = DEFAULT_FUZZ[profile] if args.fuzz is None else args.fuzz
        specs += strategies.sample_specs(strategies.SPACES[profile], n, args.seed)
    if args.max_cases is not None:
        if args.max_cases < 0:
            raise ValueError("--max-cases must be >= 0")
        specs = specs[: args.max_cases]
    return ut, bl, provs, profile, specs


def shape_p_specs() -> list:
    """The production shape P (DEVELOPERS.md), plain and fused rotary, bf16 D=128."""
    from blockattn.harness.spec import CaseSpec

    shape = dict(B=1152, max_len=4096, sparsity=0.7, H=4, D=128, dtype="bfloat16", seed=7)
    return [
        CaseSpec(variant=v, source="shape-p", name=f"shape-P-{v}-bf16-d128", **shape)
        for v in ("plain", "rotary")
    ]


def load_tolerances(args: argparse.Namespace, device: str | None = None):
    from blockattn.harness import tolerances

    if getattr(args, "no_tolerances", False):
        return None
    path = args.tolerances or tolerances.latest_released(
        tolerances.default_tolerance_dir(), device=device
    )
    if path is None:
        print("note: no released tolerance file found; recording metrics only", file=sys.stderr)
        return None
    problems = tolerances.check_manifest(Path(path).parent)
    if problems:
        raise ValueError("; ".join(problems))
    return tolerances.load(path)


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


def main(args: argparse.Namespace) -> int:
    from blockattn.harness import session, verdict
    from blockattn.harness.runner import device_info, git_commit, run_cases
    from blockattn.harness.summarize import markdown_tables, verdict_markdown

    device = session.setup_device()
    tol = load_tolerances(args, device)
    ut, bl, provs, profile, specs = resolve_plan(args, device)
    out = args.out or session.default_out("run")
    info = device_info()
    print(
        f"blockattn run: {len(specs)} cases on {info['device']} ({info['gpu']}), "
        f"providers {provs}, under test {ut}, baseline {bl}, profile {profile}, "
        f"tolerances {tol.path if tol else 'none'} -> {out}",
        file=sys.stderr,
    )
    try:
        records = run_cases(
            specs,
            out,
            provider_names=provs,
            under_test=ut,
            baseline=bl,
            resume=args.resume,
            tol=tol,
            progress=not args.no_progress,
        )
    except KeyboardInterrupt:
        # Every finished case is already fsynced to results.jsonl; the interrupted one is not.
        print(
            f"\ninterrupted: finished cases are in {out}/results.jsonl; "
            f"`blockattn report {out}` renders them, `blockattn run --out {out} --resume` "
            "continues",
            file=sys.stderr,
        )
        return 130  # 128 + SIGINT, the shell convention for an interrupted command
    checks = None if args.no_selfcheck else selfcheck_section(device)
    meta = {
        **info,
        "commit": git_commit(),
        "profile": profile,
        "under_test": ut,
        "baseline": bl,
        "providers": provs,
        "tolerances": str(tol.path) if tol else None,
        "n_cases": len(records),
        "finished": session.timestamp(),
    }
    verdicts = [verdict.evaluate(r, tol, ut) for r in records] if tol else []
    session.write_report_json(out, records, meta, {"selfcheck": checks})
    md = [f"# blockattn run — {info['device']} ({info['gpu']}), commit {meta['commit']}", ""]
    if tol:
        md += [verdict_markdown(verdicts, records), ""]
    md += [markdown_tables(records)]
    if checks is not None:
        md += [
            "",
            "## Oracle self-check",
            "",
            "| check | value | bound | passed |",
            "|---|---|---|---|",
        ]
        md += [f"| {c['name']} | {c['value']} | {c['bound']} | {c['passed']} |" for c in checks]
    (out / "summary.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"\nreport: {out}/summary.md  (plots: blockattn report {out})", file=sys.stderr)
    failed = any(not v.passed for v in verdicts)
    failed = failed or any(not c.get("passed", True) for c in checks or [])
    return 1 if failed else 0
