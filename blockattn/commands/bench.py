"""`blockattn bench`: copy ceiling + blockattn / FA2 / rotary baselines, JSON, CSV, plots."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HELP = "Benchmark blockattn against FA2 (+ rotary), SDPA, FlexAttention, eager vs the copy ceiling."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=None,
                        help="output directory (default reports/bench-<timestamp>, beside the "
                        "run and gate reports)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="reduced sweeps")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny shapes; on CPU under TRITON_INTERPRET=1 with a wall-clock timer",
    )
    parser.add_argument(
        "--time-budget-s",
        type=float,
        default=420.0,
        help="skip remaining points once this much wall time has passed (default 420)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-sweeps", action="store_true", help="main shapes only")
    parser.add_argument("--no-extras", action="store_true", help="skip eager, SDPA/cuDNN, flex")
    parser.add_argument(
        "--providers", default=None, help="comma-separated subset of providers (default all)"
    )
    parser.add_argument(
        "--cases", default=None,
        help="comma-separated subset of the bench's cases by name, e.g. P_D128,P_D64 (default "
        "all; an unknown name is an error that lists the known ones)",
    )
    parser.add_argument(
        "--ceiling-gb", type=float, default=2.0, help="copy-ceiling buffer size in GiB (default 2)"
    )
    parser.add_argument(
        "--gpu-kind",
        default=None,
        help="machine kind recorded in bench.json meta and every row, e.g. nvidia-h100-x1 "
        "(default: a slug of torch.cuda.get_device_name(), or 'cpu'); the report refuses to "
        "compare results of different kinds",
    )
    _add_provider_option(parser)
    parser.add_argument(
        "--no-projection",
        action="store_true",
        help="skip the projection packed-vs-unfused gradient entries (--providers does not "
        "filter them)",
    )
    _add_isolation(parser)


def _add_isolation(parser: argparse.ArgumentParser) -> None:
    from blockattn.commands._options import add_isolation_options

    add_isolation_options(parser)


def _add_provider_option(parser: argparse.ArgumentParser) -> None:
    from blockattn.commands._options import add_provider_option

    add_provider_option(parser)  # timed at the main shapes and sweeps beside blockattn, FA v2


def _names(text: str) -> tuple[str, ...]:
    """The names of a comma-separated option (--providers, --cases)."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _needs_interpreter() -> bool:
    import torch

    from blockattn.kernels.attention import INTERPRET

    return not torch.cuda.is_available() and not INTERPRET


def _reexec(args: argparse.Namespace) -> int:
    # TRITON_INTERPRET is read when the kernels are defined, i.e. when `blockattn` is imported,
    # which the CLI has already done: rerun this command in a child with it set.
    argv = [sys.executable, "-m", "blockattn", "bench", "--smoke", "--out", args.out]
    argv += ["--time-budget-s", str(args.time_budget_s), "--seed", str(args.seed)]
    argv += ["--ceiling-gb", str(args.ceiling_gb)]
    argv += ["--quick"] * args.quick + ["--no-sweeps"] * args.no_sweeps
    argv += ["--no-extras"] * args.no_extras
    if args.providers:
        argv += ["--providers", args.providers]
    if args.cases:
        argv += ["--cases", args.cases]
    argv += ["--gpu-kind", args.gpu_kind] * bool(args.gpu_kind)
    argv += ["--no-projection"] * args.no_projection
    if args.call_timeout:
        argv += ["--call-timeout", str(args.call_timeout)]
    argv += ["--in-process"] * bool(args.in_process)
    for spec in args.provider or []:
        argv += ["--provider", spec]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run(argv, env=env, check=False).returncode


def main(args: argparse.Namespace) -> int:
    if args.out is None:  # decided once, before a re-exec, so both name the same directory
        from blockattn.run.session import default_out

        args.out = str(default_out("bench"))
    if args.smoke and _needs_interpreter():
        return _reexec(args)
    from blockattn import providers as registry
    from blockattn.bench import BenchConfig, run_benchmark
    from blockattn.bench.entries import add_outside, entries
    from blockattn.bench.report import summary_markdown
    from blockattn.commands._options import isolate, load_provider_specs, say_isolation_failures

    outside: tuple[str, ...] = ()
    loaded = load_provider_specs(args.provider)
    # blockattn and every outside kernel are timed in the worker, on the judge's clock
    isolate(["blockattn", *loaded])
    for name in loaded:
        prov = registry.get(name)
        outside += (tuple(t.name for t in registry.timings_of(prov)) if prov.origin == "builtin"
                    else add_outside(prov))  # fmt: skip
    providers = None
    if args.providers:
        providers = _names(args.providers) + outside
        known = entries()
        unknown = set(providers) - set(known)
        if unknown:
            raise ValueError(f"unknown providers {sorted(unknown)}; known: {sorted(known)}")
    cfg = BenchConfig(
        out=args.out,
        quick=args.quick,
        smoke=args.smoke,
        time_budget_s=args.time_budget_s,
        seed=args.seed,
        sweeps=not args.no_sweeps,
        extras=not args.no_extras,
        providers=providers,
        cases=_names(args.cases) if args.cases else None,
        ceiling_bytes=int(args.ceiling_gb * 2**30),
        gpu_kind=args.gpu_kind,
        projection=not args.no_projection,
        outside=outside,
    )
    try:
        data = run_benchmark(cfg)
    except KeyboardInterrupt:
        print(f"interrupted: partial results in {args.out}/bench.json", file=sys.stderr)
        return 130
    plots = data.get("plots")
    plots = ", ".join(plots) if isinstance(plots, list) else plots
    print(f"wrote {args.out}/: bench.json, bench.csv; plots: {plots or 'none'}")
    print(summary_markdown(data))  # last thing printed
    say_isolation_failures("bench", data.get("isolation") or [])  # also in bench.json, above
    ours = [c for c in data["checks"]
            if c["provider"].startswith("blockattn") or c["provider"] in outside]  # fmt: skip
    return 1 if data.get("isolation") or any(c.get("check") != "pass" for c in ours) else 0
