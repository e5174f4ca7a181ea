"""Options shared by the commands: outside providers, case filters, validated numbers.

Every numeric option is checked by argparse itself (exit 2 with `argument --NAME: ...`), so a
negative count or a malformed shard never reaches the run.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from blockattn.cases.plan import Selection
from blockattn.names import DISTRIBUTIONS, DTYPE_ALIASES, DTYPE_NAMES, VARIANTS

PROVIDER_HELP = (
    "a known provider by name (fa4, fa2, eager, ...) or an outside kernel: "
    "[NAME=]MODULE:CALLABLE, a callable with block_attention's signature "
    "(repeatable; on run/gate the first is the one under test unless --under-test says "
    "otherwise); "
    "installed packages may also register providers under the entry-point group "
    "'blockattn.providers'"
)


def int_at_least(lo: int) -> Any:
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if n < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {n}")
        return n

    return parse


def shard_spec(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected I/N (e.g. 1/4), got {text!r}")
    i, n = int(m.group(1)), int(m.group(2))
    if not 1 <= i <= n:
        raise argparse.ArgumentTypeError(f"I/N needs 1 <= I <= N, got {text!r}")
    return i, n


def dtype_name(text: str) -> str:
    name = DTYPE_ALIASES.get(text, text)
    if name not in DTYPE_NAMES:
        raise argparse.ArgumentTypeError(f"unknown dtype {text!r} (known: {list(DTYPE_NAMES)})")
    return name


def add_provider_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--provider", action="append", metavar="NAME|[NAME=]MODULE:CALLABLE",
                   help=PROVIDER_HELP)  # fmt: skip


def add_selection_options(p: argparse.ArgumentParser, *, shard: bool = True) -> None:
    g = p.add_argument_group("case selection (repeatable; cases must match every filter given)")
    g.add_argument("--dtype", action="append", type=dtype_name, help="bfloat16|float16|float32")
    g.add_argument("--head-dim", action="append", type=int_at_least(1), help="head dim D")
    g.add_argument("--variant", action="append", choices=VARIANTS)
    g.add_argument("--distribution", action="append", choices=DISTRIBUTIONS)
    g.add_argument("--case", action="append", metavar="ID",
                   help="a case id (plai-bflo-1a2b3c4d5e) or a corpus/fuzz case name")  # fmt: skip
    if shard:
        g.add_argument("--shard", type=shard_spec, metavar="I/N",
                       help="run only shard I of N (1-based, round-robin over the plan): a CI "
                       "matrix splits the cases; `blockattn merge` joins the reports")  # fmt: skip
        g.add_argument("--shard-costs", metavar="FILE",
                       help="with --shard: balance the shards by measured seconds per case "
                       "(longest first, each to the least loaded shard) from FILE: a report.json "
                       "(e.g. the CI baseline), a results.jsonl, a report directory or a JSON "
                       "{case_id: seconds}; unknown cases are estimated from their size. Every "
                       "shard must name the same file (merge checks its sha256)")  # fmt: skip


def selection_from(args: argparse.Namespace) -> Selection:
    def tup(name: str) -> tuple | None:
        v = getattr(args, name, None)
        return tuple(dict.fromkeys(v)) if v else None

    return Selection(
        dtypes=tup("dtype"),
        head_dims=tup("head_dim"),
        variants=tup("variant"),
        distributions=tup("distribution"),
        cases=tup("case"),
        shard=getattr(args, "shard", None),
        **_shard_costs(args),
    )


def _shard_costs(args: argparse.Namespace) -> dict[str, str]:
    path = getattr(args, "shard_costs", None)
    if path is None:
        return {}
    if getattr(args, "shard", None) is None:
        raise ValueError("--shard-costs balances --shard I/N: give --shard too")
    from blockattn.cases import shard_costs

    shard_costs.load_costs(path)  # a usage error now, not a crash in the middle of the plan
    return {"shard_costs": str(path), "shard_costs_sha256": shard_costs.digest(path)}


def load_tolerances(args: argparse.Namespace, device: str | None = None):
    from blockattn.judge import tolerances

    if getattr(args, "no_tolerances", False):
        return None
    path = args.tolerances or tolerances.latest_released(
        tolerances.default_tolerance_dir(), device=device
    )
    if path is None:  # fail closed: a run nobody judged must not exit 0 looking judged
        raise ValueError(
            f"no released tolerance file for device {device!r} in "
            f"{tolerances.default_tolerance_dir()}: pass --tolerances FILE, or --no-tolerances "
            "to record metrics only"
        )
    tol = tolerances.load(path)
    tolerances.require_released(tol, getattr(args, "allow_unreleased_tolerances", False))
    if args.tolerances is None:  # say which file judges, so nobody has to guess
        print(f"tolerances: {path} ({tol.label}), the newest released for {device}",
              file=sys.stderr)  # fmt: skip
    calibrated = (tol.data.get("provenance") or {}).get("device")
    if device and calibrated and calibrated != device:  # a GPU file on a CPU run, or the reverse
        newest = tolerances.latest_released(tolerances.default_tolerance_dir(), device=device)
        print(f"note: tolerances {tol.label} were calibrated on {calibrated} and these cases run "
              f"on {device}: the pipelines differ (CPU interpreter vs GPU kernels, eager vs FA v2 "
              f"baseline); the newest released file for {device} is "
              f"{newest.stem if newest else 'none'}", file=sys.stderr)  # fmt: skip
    return tol


def add_unreleased_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-unreleased-tolerances", action="store_true",
                   help="judge with a tolerance file that is not a released one (its sha256 is "
                        "in no MANIFEST entry of the package); reports say UNRELEASED")  # fmt: skip


def seconds(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return x


def add_isolation_options(p: argparse.ArgumentParser) -> None:
    """The kernel under test runs in a worker process (blockattn.run.isolated)."""
    from blockattn.names import CALL_TIMEOUT_S as DEFAULT_CALL_TIMEOUT

    g = p.add_argument_group("isolation (the kernel under test runs in a worker process)")
    g.add_argument("--call-timeout", type=seconds, default=None, metavar="SECONDS",
                   help="watchdog of every call into the worker (import, forward+backward, each "
                   f"probe, bench batches); a call past it fails its case (default "
                   f"{DEFAULT_CALL_TIMEOUT:g})")  # fmt: skip
    g.add_argument("--in-process", action="store_true",
                   help="debugging only: call the kernel in the judge's own process; every "
                   "result is stamped NOT ISOLATED and the gate refuses the run")  # fmt: skip


def starts_worker(args: argparse.Namespace) -> bool:
    """Whether the run calls a kernel (gate --report judges stored records: no worker)."""
    return not getattr(args, "in_process", False) and getattr(args, "report", None) is None


def isolation(args: argparse.Namespace) -> Any:
    """The run's isolation session (a context manager yielding `run.isolated.Sandbox`)."""
    from blockattn.run import isolated

    in_process = bool(getattr(args, "in_process", False))
    if in_process:
        print(f"blockattn: {isolated.NOT_ISOLATED}: --in-process calls the kernel in the judge's "
              "own process (debugging); the gate refuses such runs", file=sys.stderr)  # fmt: skip
    # files the run reads besides the package's (watched with them while the kernel runs); a
    # baseline directory is its report.json
    watch = []
    for f in (getattr(args, "baseline", None), getattr(args, "tolerances", None)):
        if isinstance(f, str) and Path(f).is_dir():
            f = str(Path(f) / "report.json")
        if isinstance(f, str) and Path(f).is_file():
            watch.append(f)
    # a run that will call a kernel spawns its worker now (gate --report may call none)
    return isolated.session(getattr(args, "call_timeout", None), in_process,
                            starts_worker(args), tuple(watch))  # fmt: skip


def load_provider_specs(specs: list[str] | None) -> list[str]:
    """Load `--provider` specs: into the run's worker when isolated (their modules are never
    imported in the judge), else here."""
    from blockattn import providers
    from blockattn.run import isolated

    sb = isolated.active()
    return sb.load_specs(specs) if sb is not None else providers.load_specs(specs)


def isolate(names: list[str]) -> None:
    """Move the kernel-role providers among `names` into the run's worker (when isolated)."""
    from blockattn.run import isolated

    sb = isolated.active()
    if sb is not None:
        sb.isolate(list(names))


def say_isolation_failures(command: str, lines: list[str]) -> None:
    """What a kernel did beyond its calls (blockattn.run.isolated.end_worker), on stderr: one
    `blockattn COMMAND: FAIL: ...` line each, as every command that hosted a kernel says it."""
    for line in lines:
        print(f"blockattn {command}: FAIL: {line}", file=sys.stderr)
